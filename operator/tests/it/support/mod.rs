//! Shared harness for integration tests against the local AWS emulators:
//! starts kinesis-local and dynalite (installed on first use by
//! `shardring::emulators`), builds SDK clients with dummy credentials in
//! us-east-1, and offers the setup calls tests need (streams, resharding,
//! KCL-format lease tables).

pub mod proxy;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use shardring::demo::reshard;
use shardring::emulators::Emulator;
use shardring::source::kinesis::reader::emulator_credentials;
use shardring::source::kinesis::{ReaderOptions, StreamId, TopologyReader, kinesis_client};

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
    shardring::lease::dynamodb_client(&sdk_config().await, Some(REGION), Some(endpoint))
}

/// A topology reader of `stream` with fast test pacing.
pub async fn reader(endpoint: &str, stream: &str, page_size: Option<i32>) -> TopologyReader {
    let options = ReaderOptions {
        page_size,
        min_call_interval: Duration::from_millis(1),
        min_refresh_interval: Duration::ZERO,
        ..ReaderOptions::default()
    };
    TopologyReader::new(
        kinesis_admin(endpoint).await,
        StreamId::named(stream),
        options,
        None,
    )
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

/// Creates a lease table in the KCL layout (hash key `leaseKey`, on demand).
pub async fn create_lease_table(client: &aws_sdk_dynamodb::Client, table: &str) {
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseKey")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attribute"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("leaseKey")
                .key_type(KeyType::Hash)
                .build()
                .expect("key"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("CreateTable");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .ok()
            .and_then(|out| out.table().and_then(|t| t.table_status().cloned()));
        if status == Some(aws_sdk_dynamodb::types::TableStatus::Active) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "table {table} not ACTIVE within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lease as the KCL writes it.
#[derive(Debug, Clone, Default)]
pub struct KclLease<'a> {
    /// leaseKey (plain shard id or `account:stream:epoch:shard`).
    pub key: &'a str,
    /// leaseOwner.
    pub owner: Option<&'a str>,
    /// leaseCounter.
    pub counter: u64,
    /// checkpoint.
    pub checkpoint: &'a str,
    /// parentShardId.
    pub parents: &'a [&'a str],
    /// childShardIds.
    pub children: &'a [&'a str],
}

/// Writes (or overwrites) one lease item in the KCL format.
pub async fn put_lease(client: &aws_sdk_dynamodb::Client, table: &str, lease: &KclLease<'_>) {
    let mut item: HashMap<String, AttributeValue> = HashMap::new();
    item.insert("leaseKey".into(), AttributeValue::S(lease.key.into()));
    if let Some(owner) = lease.owner {
        item.insert("leaseOwner".into(), AttributeValue::S(owner.into()));
    }
    item.insert(
        "leaseCounter".into(),
        AttributeValue::N(lease.counter.to_string()),
    );
    item.insert(
        "checkpoint".into(),
        AttributeValue::S(lease.checkpoint.into()),
    );
    item.insert(
        "checkpointSubSequenceNumber".into(),
        AttributeValue::N("0".into()),
    );
    item.insert(
        "ownerSwitchesSinceCheckpoint".into(),
        AttributeValue::N("0".into()),
    );
    if !lease.parents.is_empty() {
        item.insert(
            "parentShardId".into(),
            AttributeValue::Ss(lease.parents.iter().map(|p| (*p).to_owned()).collect()),
        );
    }
    if !lease.children.is_empty() {
        item.insert(
            "childShardIds".into(),
            AttributeValue::Ss(lease.children.iter().map(|p| (*p).to_owned()).collect()),
        );
    }
    client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .expect("PutItem");
}

/// Deletes one lease item (as the KCL does for a finished parent).
pub async fn delete_lease(client: &aws_sdk_dynamodb::Client, table: &str, key: &str) {
    client
        .delete_item()
        .table_name(table)
        .key("leaseKey", AttributeValue::S(key.into()))
        .send()
        .await
        .expect("DeleteItem");
}
