//! What the operator's AWS adapters share, whichever service they call: the
//! client settings ([`client_config`]), full-jitter [`Backoff`] for retries (the workspace's one backoff, from
//! `shardring-backoff`),
//! and the error codes and error-chain text their failures are classified
//! by. The Kinesis source and the lease-table reader both build on this
//! module, and it imports neither of them.

mod errors;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{Region, SdkConfig};

pub use errors::chain;
pub(crate) use errors::{is_access_code, is_throttle_code};
pub use shardring_backoff::{Backoff, jitter_unit};

/// The AWS settings every operator client uses (Kinesis and the lease
/// table's DynamoDB): the shared config (default credential chain) with an
/// optional region and endpoint override, short timeouts, and SDK retries
/// off — the readers retry themselves so they can count throttles and bound
/// attempts.
pub fn client_config(base: &SdkConfig, region: Option<&str>, endpoint: Option<&str>) -> SdkConfig {
    let mut builder = base
        .to_builder()
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(3))
                .operation_attempt_timeout(Duration::from_secs(10))
                .build(),
        );
    if let Some(region) = region {
        builder = builder.region(Region::new(region.to_owned()));
    }
    if let Some(endpoint) = endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    builder.build()
}
