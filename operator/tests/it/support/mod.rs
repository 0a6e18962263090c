//! Shared harness for integration tests against the local AWS emulators:
//! starts kinesis-local and dynalite (the devkit's launcher, which installs
//! them on first use), builds SDK clients with dummy credentials in
//! us-east-1, and offers the setup calls tests need (streams, resharding,
//! KCL-format lease tables, whose items are written by the one KCL lease
//! record, `shardring::lease_table::record`).

pub mod proxy;

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use shardring::engine::Pod;
use shardring::lease_table::record::attribute;
use shardring::lease_table::{Checkpoint, LeaseRecord};
use shardring::source::kinesis::reader::emulator_credentials;
use shardring::source::kinesis::{
    KinesisMetrics, ReaderOptions, StreamId, TopologyReader, kinesis_client,
};
use shardring_devkit::emulators::Emulator;
use shardring_devkit::stream::reshard;

/// The region every test uses.
pub const REGION: &str = "us-east-1";

/// Starts kinesis-local, failing the test with the emulator's log if it cannot.
pub fn kinesis() -> Emulator {
    Emulator::start_kinesis().unwrap_or_else(|e| panic!("{e}"))
}

/// Starts dynalite.
pub fn dynamodb() -> Emulator {
    Emulator::start_dynamodb().unwrap_or_else(|e| panic!("{e}"))
}

/// AWS config with dummy static credentials and region us-east-1 (no
/// environment needed).
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .credentials_provider(emulator_credentials())
        .region(aws_config::Region::new(REGION))
        .load()
        .await
}

/// A Kinesis client for setup calls (the reader builds its own).
pub async fn kinesis_admin(endpoint: &str) -> aws_sdk_kinesis::Client {
    kinesis_client(&sdk_config().await, Some(REGION), Some(endpoint))
}

/// A DynamoDB client for setup calls.
pub async fn dynamodb_admin(endpoint: &str) -> aws_sdk_dynamodb::Client {
    shardring::lease_table::dynamodb_client(&sdk_config().await, Some(REGION), Some(endpoint))
}

/// Reader options with fast test pacing (1 ms between calls, no refresh
/// floor) and pages of `page_size` shards.
pub fn fast_options(page_size: Option<i32>) -> ReaderOptions {
    ReaderOptions {
        page_size,
        min_call_interval: Duration::from_millis(1),
        min_refresh_interval: Duration::ZERO,
        ..ReaderOptions::default()
    }
}

/// A topology reader of `stream` at `endpoint` (kinesis-local, or a fault
/// proxy in front of it).
pub async fn reader_with(
    endpoint: &str,
    stream: &str,
    options: ReaderOptions,
    metrics: Option<KinesisMetrics>,
) -> TopologyReader {
    TopologyReader::new(
        kinesis_admin(endpoint).await,
        StreamId::named(stream),
        options,
        metrics,
    )
}

/// A topology reader of `stream` with fast test pacing.
pub async fn reader(endpoint: &str, stream: &str, page_size: Option<i32>) -> TopologyReader {
    reader_with(endpoint, stream, fast_options(page_size), None).await
}

/// A ready engine pod `name` of capacity 1.
pub fn ready_pod(name: &str) -> Pod {
    Pod {
        name: name.to_owned(),
        ready: true,
        terminating: false,
        capacity: 1,
        zone: None,
        node: None,
        ready_since: None,
    }
}

/// Creates a provisioned stream with `shards` shards and waits for ACTIVE.
pub async fn create_stream(client: &aws_sdk_kinesis::Client, stream: &str, shards: i32) {
    reshard::create_stream(
        client,
        stream,
        u32::try_from(shards).expect("a positive shard count"),
    )
    .await
    .unwrap_or_else(|e| panic!("CreateStream: {e}"));
}

/// Splits `shard` at the middle of its range and waits for ACTIVE.
pub async fn split_in_half(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    shard: &str,
    start: u128,
    end: u128,
) {
    let parent = reshard::StreamShard {
        id: shard.to_owned(),
        parents: Vec::new(),
        start,
        end,
        open: true,
    };
    reshard::split_in_half(client, stream, &parent)
        .await
        .unwrap_or_else(|e| panic!("SplitShard: {e}"));
}

/// Merges two adjacent shards and waits for ACTIVE.
pub async fn merge(client: &aws_sdk_kinesis::Client, stream: &str, shard: &str, adjacent: &str) {
    reshard::merge(client, stream, shard, adjacent)
        .await
        .unwrap_or_else(|e| panic!("MergeShards: {e}"));
}

/// UpdateShardCount (uniform scaling) and waits for ACTIVE.
pub async fn update_shard_count(client: &aws_sdk_kinesis::Client, stream: &str, target: i32) {
    reshard::update_shard_count(
        client,
        stream,
        u32::try_from(target).expect("a positive shard count"),
    )
    .await
    .unwrap_or_else(|e| panic!("UpdateShardCount: {e}"));
}

/// Creates a lease table in the KCL layout and waits for ACTIVE.
pub async fn create_lease_table(client: &aws_sdk_dynamodb::Client, table: &str) {
    shardring_consumer::lease::create_table(client, table, Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A lease as the KCL writes it: `key` held by `owner` (`None`: free) at
/// `counter`, checkpointed at `checkpoint`, no owner switch since. Parents
/// and children are added with struct update syntax.
pub fn kcl_lease(
    key: &str,
    owner: Option<&str>,
    counter: u64,
    checkpoint: Checkpoint,
) -> LeaseRecord {
    LeaseRecord {
        lease_owner: owner.map(str::to_owned),
        lease_counter: Some(counter),
        checkpoint: Some(checkpoint),
        checkpoint_sub_sequence_number: Some(0),
        owner_switches_since_checkpoint: Some(0),
        ..LeaseRecord::new(key)
    }
}

/// Writes (or overwrites) `lease`'s item as the KCL stores it.
pub async fn put_lease(client: &aws_sdk_dynamodb::Client, table: &str, lease: &LeaseRecord) {
    client
        .put_item()
        .table_name(table)
        .set_item(Some(lease.to_item()))
        .send()
        .await
        .expect("PutItem");
}

/// Deletes one lease item (as the KCL does for a finished parent).
pub async fn delete_lease(client: &aws_sdk_dynamodb::Client, table: &str, key: &str) {
    client
        .delete_item()
        .table_name(table)
        .key(attribute::LEASE_KEY, AttributeValue::S(key.into()))
        .send()
        .await
        .expect("DeleteItem");
}
