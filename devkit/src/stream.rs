//! Kinesis streams on kinesis-local, for every crate that creates or
//! reshards one (the demo and its scenarios, the operator's and the
//! consumer's tests, the end-to-end harness): waiting until a stream is
//! ACTIVE again, the one such wait in the workspace, and the calls that
//! create and reshard a stream ([`reshard`]).

pub mod reshard;

use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::types::StreamStatus;
use tokio::time::Instant;

use crate::wait::WaitError;

/// How often [`wait_active`] asks for the stream's status (kinesis-local
/// finishes a reshard in well under a second).
pub const ACTIVE_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Waits until `stream` is ACTIVE (DescribeStreamSummary every
/// [`ACTIVE_POLL_INTERVAL`]; a failed call counts as not yet), or fails with
/// the last status seen once `timeout` has passed.
pub async fn wait_active(
    client: &Client,
    stream: &str,
    timeout: Duration,
) -> Result<(), WaitError> {
    let start = Instant::now();
    loop {
        let status = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .ok()
            .and_then(|o| {
                o.stream_description_summary()
                    .map(|s| s.stream_status().clone())
            });
        if status == Some(StreamStatus::Active) {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            return Err(WaitError::Timeout {
                what: format!("stream {stream} to be ACTIVE"),
                waited: start.elapsed(),
                last: match status {
                    Some(status) => status.as_str().to_owned(),
                    None => "no status (DescribeStreamSummary failed)".to_owned(),
                },
            });
        }
        tokio::time::sleep(ACTIVE_POLL_INTERVAL).await;
    }
}

/// A Kinesis client of the emulator at `endpoint`, with the static
/// credentials it accepts.
#[cfg(test)]
fn emulator_client(endpoint: &str) -> Client {
    use aws_sdk_kinesis::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_kinesis::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("devkit", "devkit", None, None, "devkit"))
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}
