//! The stream side of a scenario on kinesis-local: the reshard calls and
//! listings of [`shardring_devkit::stream::reshard`] (shared with `shardring-dev demo`
//! and its embedded scenarios, and tested there against kinesis-local),
//! and the devkit's wait for ACTIVE, with the harness's error type.

use std::collections::BTreeMap;

use aws_sdk_kinesis::Client;
use shardring_devkit::stream::reshard::{self, ReshardError};

use crate::error::HarnessError;

fn harness(error: ReshardError) -> HarnessError {
    HarnessError::Aws(error.to_string())
}

/// Splits the open shard with the widest hash key range in two.
pub async fn split_widest(kinesis: &Client, stream: &str) -> Result<String, HarnessError> {
    reshard::split_widest(kinesis, stream)
        .await
        .map_err(harness)
}

/// Merges the first two adjacent open shards.
pub async fn merge_adjacent(
    kinesis: &Client,
    stream: &str,
) -> Result<(String, String), HarnessError> {
    reshard::merge_adjacent(kinesis, stream)
        .await
        .map_err(harness)
}

/// UpdateShardCount to `target` with uniform scaling.
pub async fn update_shard_count(
    kinesis: &Client,
    stream: &str,
    target: u32,
) -> Result<(), HarnessError> {
    reshard::update_shard_count(kinesis, stream, target)
        .await
        .map_err(harness)
}

/// Child → parents of every shard the stream ever had.
pub async fn parents(
    kinesis: &Client,
    stream: &str,
) -> Result<BTreeMap<String, Vec<String>>, HarnessError> {
    reshard::parents(kinesis, stream).await.map_err(harness)
}

/// Ids of the shards still open.
pub async fn open_shards(kinesis: &Client, stream: &str) -> Result<Vec<String>, HarnessError> {
    reshard::open_shards(kinesis, stream).await.map_err(harness)
}

/// Waits until the stream is ACTIVE (the devkit's wait, as long as a
/// reshard of [`reshard`] may take).
pub async fn wait_active(kinesis: &Client, stream: &str) -> Result<(), HarnessError> {
    Ok(shardring_devkit::stream::wait_active(kinesis, stream, reshard::ACTIVE_DEADLINE).await?)
}
