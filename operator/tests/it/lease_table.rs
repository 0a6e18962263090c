//! The KCL lease table reader against dynalite: a consistent paged scan of
//! KCL-format items (plain and multi-stream keys, missing fields), counter
//! change times across scans with an injected clock, and error reasons.

use std::time::Duration;

use jiff::Timestamp;
use shardring::lease_table::{Checkpoint, CheckpointKind, LeaseRecord, LeaseTableReader};

use crate::support;
use crate::support::kcl_lease;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("valid")
}

#[tokio::test]
async fn scans_every_page_and_tracks_counter_changes() {
    let dynamo = support::dynamodb();
    let client = support::dynamodb_admin(&dynamo.endpoint()).await;
    support::create_lease_table(&client, "orders-app").await;
    let parent = "shardId-000000000000";
    let leases = [
        LeaseRecord {
            child_shard_ids: vec!["shardId-000000000001".into(), "shardId-000000000002".into()],
            ..kcl_lease(parent, None, 9, Checkpoint::ShardEnd)
        },
        LeaseRecord {
            parent_shard_ids: vec![parent.into()],
            ..kcl_lease(
                "shardId-000000000001",
                Some("pod-a"),
                3,
                Checkpoint::Sequence(
                    "49590338271490256608559692538361571095921575989136588898".into(),
                ),
            )
        },
        LeaseRecord {
            parent_shard_ids: vec![parent.into()],
            ..kcl_lease(
                "shardId-000000000002",
                Some("pod-b"),
                5,
                Checkpoint::TrimHorizon,
            )
        },
        kcl_lease("shardId-000000000003", Some("pod-b"), 1, Checkpoint::Latest),
        kcl_lease(
            "shardId-000000000004",
            Some("pod-a"),
            1,
            Checkpoint::AtTimestamp,
        ),
        // Multi-stream keys: one for this stream, one for another.
        kcl_lease(
            "000000000000:orders:1700000000:shardId-000000000005",
            Some("pod-c"),
            2,
            Checkpoint::Latest,
        ),
        kcl_lease(
            "000000000000:payments:1700000000:shardId-000000000009",
            Some("pod-z"),
            2,
            Checkpoint::Latest,
        ),
    ];
    for lease in &leases {
        support::put_lease(&client, "orders-app", lease).await;
    }
    // A bare item with only its key (older writers) is tolerated.
    support::put_lease(
        &client,
        "orders-app",
        &LeaseRecord::new("shardId-000000000006"),
    )
    .await;

    let mut registry = prometheus_client::registry::Registry::with_prefix("shardring");
    let metrics = shardring::lease_table::LeaseTableMetrics::register(&mut registry);
    let reader = LeaseTableReader::new(
        support::dynamodb_admin(&dynamo.endpoint()).await,
        "orders-app",
        Some("orders".into()),
        Some(metrics),
    )
    .with_page_size(Some(2));
    let first = reader.read(at(0)).await.expect("scan");
    assert_eq!(first.items, 8, "every page scanned");
    assert_eq!(first.leases.len(), 7, "the other stream's lease is dropped");
    let parent = first.get("shardId-000000000000").expect("parent");
    assert!(parent.complete && parent.owner.is_none());
    assert_eq!(
        parent.children,
        vec!["shardId-000000000001", "shardId-000000000002"]
    );
    let child = first.get("shardId-000000000001").expect("child");
    assert_eq!(child.owner.as_deref(), Some("pod-a"));
    assert_eq!(child.checkpoint, Some(CheckpointKind::Sequence));
    assert_eq!(child.parents, vec!["shardId-000000000000"]);
    assert_eq!(
        first.get("shardId-000000000002").and_then(|l| l.checkpoint),
        Some(CheckpointKind::TrimHorizon)
    );
    assert_eq!(
        first.get("shardId-000000000003").and_then(|l| l.checkpoint),
        Some(CheckpointKind::Latest)
    );
    assert_eq!(
        first.get("shardId-000000000004").and_then(|l| l.checkpoint),
        Some(CheckpointKind::AtTimestamp)
    );
    assert_eq!(
        first
            .get("shardId-000000000005")
            .and_then(|l| l.owner.as_deref()),
        Some("pod-c")
    );
    let bare = first.get("shardId-000000000006").expect("bare item");
    assert_eq!(
        (bare.owner.as_deref(), bare.counter, bare.checkpoint),
        (None, 0, None)
    );

    // pod-a renews shard 1; pod-b stops renewing shard 2.
    support::put_lease(
        &client,
        "orders-app",
        &LeaseRecord {
            lease_counter: Some(4),
            ..leases[1].clone()
        },
    )
    .await;
    let second = reader.read(at(20)).await.expect("scan");
    let renewed = second.get("shardId-000000000001").expect("renewed");
    let stale = second.get("shardId-000000000002").expect("stale");
    assert_eq!(renewed.counter_changed_at, at(20));
    assert_eq!(stale.counter_changed_at, at(0));
    let failover = Duration::from_secs(10);
    assert!(stale.is_expired(at(20), failover));
    assert!(!renewed.is_expired(at(20), failover));
    assert_eq!(reader.last().map(|t| t.scanned_at), Some(Some(at(20))));

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains("shardring_lease_table_leases{table=\"orders-app\"} 7"),
        "{text}"
    );
    assert!(
        text.contains("shardring_lease_table_scan_seconds_count{table=\"orders-app\"} 2"),
        "{text}"
    );
}

#[tokio::test]
async fn a_missing_table_is_table_not_found() {
    let dynamo = support::dynamodb();
    let reader = LeaseTableReader::new(
        support::dynamodb_admin(&dynamo.endpoint()).await,
        "no-such-table",
        None,
        None,
    );
    let error = reader.read(at(0)).await.expect_err("no table");
    assert_eq!(error.reason(), "TableNotFound", "{error}");
    assert!(reader.last().is_none());
}
