//! AWS clients for consumers: the SDK config (region, and static dummy
//! credentials for the local emulators), and Kinesis/DynamoDB clients with
//! an optional endpoint override, bounded timeouts and the SDK's standard
//! retries (the reader and lease manager add their own backoff on top for
//! throttling that outlasts them).

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_kinesis::config::{Credentials, SharedCredentialsProvider};

/// Loads the SDK config. With `emulator_credentials`, static dummy
/// credentials are used (kinesis-local and dynalite accept any); otherwise
/// the default provider chain (environment, web identity, IMDS, ...).
pub async fn sdk_config(region: Option<&str>, emulator_credentials: bool) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(3))
                .operation_attempt_timeout(Duration::from_secs(10))
                .build(),
        );
    if let Some(region) = region {
        loader = loader.region(Region::new(region.to_owned()));
    }
    if emulator_credentials {
        loader = loader.credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKIDSHARDRINGLOCAL",
            "shardring-local-secret",
            None,
            None,
            "shardring-emulator",
        )));
    }
    loader.load().await
}

/// A Kinesis client, talking to `endpoint` when given (an emulator).
pub fn kinesis_client(config: &SdkConfig, endpoint: Option<&str>) -> aws_sdk_kinesis::Client {
    let mut builder = aws_sdk_kinesis::config::Builder::from(config);
    if let Some(endpoint) = endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    aws_sdk_kinesis::Client::from_conf(builder.build())
}

/// A DynamoDB client, talking to `endpoint` when given (an emulator).
pub fn dynamodb_client(config: &SdkConfig, endpoint: Option<&str>) -> aws_sdk_dynamodb::Client {
    let mut builder = aws_sdk_dynamodb::config::Builder::from(config);
    if let Some(endpoint) = endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    aws_sdk_dynamodb::Client::from_conf(builder.build())
}
