//! The Kinesis topology reader against kinesis-local: create, split, merge,
//! UpdateShardCount 2→4→8, multi-page listings, and shared readers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use shardring::source::kinesis::{KinesisShard, ReaderOptions, ReaderRegistry, StreamId};

use crate::support;

const MAX: u128 = u128::MAX;

fn open(shards: &[KinesisShard]) -> Vec<&KinesisShard> {
    shards.iter().filter(|s| !s.closed).collect()
}

fn by_id<'a>(shards: &'a [KinesisShard], id: &str) -> &'a KinesisShard {
    shards
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("{id} not listed in {shards:?}"))
}

/// Open shards tile the key space exactly: sorted by start, each starts one
/// past the previous end, from 0 to 2^128-1.
fn assert_tiles_key_space(shards: &[KinesisShard]) {
    let mut ranges: Vec<(u128, u128)> = open(shards)
        .iter()
        .map(|s| {
            let range = s.hash_key_range.as_ref().expect("range");
            (
                range.start.parse().expect("start"),
                range.end.parse().expect("end"),
            )
        })
        .collect();
    ranges.sort();
    assert_eq!(ranges.first().map(|r| r.0), Some(0));
    assert_eq!(ranges.last().map(|r| r.1), Some(MAX));
    for pair in ranges.windows(2) {
        assert_eq!(pair[0].1 + 1, pair[1].0, "gap or overlap in {ranges:?}");
    }
}

#[tokio::test]
async fn create_split_and_merge() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "orders", 2).await;
    let reader = support::reader(&kinesis.endpoint(), "orders", None).await;

    let created = reader.list().await.expect("list").shards;
    assert_eq!(created.len(), 2);
    assert!(created.iter().all(|s| !s.closed && s.parents().is_empty()));
    assert_tiles_key_space(&created);

    // Split shard 0 in half: it closes and two children name it as parent.
    let range = by_id(&created, "shardId-000000000000")
        .hash_key_range
        .clone()
        .expect("range");
    support::split_in_half(
        &admin,
        "orders",
        "shardId-000000000000",
        range.start.parse().unwrap(),
        range.end.parse().unwrap(),
    )
    .await;
    let split = reader.list().await.expect("list").shards;
    assert_eq!(split.len(), 4, "closed parent stays listed: {split:?}");
    assert!(by_id(&split, "shardId-000000000000").closed);
    let children: Vec<&KinesisShard> = split
        .iter()
        .filter(|s| s.parent.as_deref() == Some("shardId-000000000000"))
        .collect();
    assert_eq!(children.len(), 2);
    assert!(
        children
            .iter()
            .all(|c| !c.closed && c.adjacent_parent.is_none())
    );
    assert_tiles_key_space(&split);

    // Merge the two children back: the merged shard has both as parents.
    let (a, b) = (children[0].id.clone(), children[1].id.clone());
    support::merge(&admin, "orders", &a, &b).await;
    let merged = reader.list().await.expect("list").shards;
    assert_eq!(merged.len(), 5);
    let child = merged
        .iter()
        .find(|s| s.adjacent_parent.is_some())
        .expect("a merged shard");
    let parents: BTreeSet<String> = child.parents().into_iter().collect();
    assert_eq!(parents, BTreeSet::from([a.clone(), b.clone()]));
    assert!(by_id(&merged, &a).closed && by_id(&merged, &b).closed);
    assert_eq!(open(&merged).len(), 2);
    assert_tiles_key_space(&merged);
}

#[tokio::test]
async fn update_shard_count_doubles_twice() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "scale", 2).await;
    let reader = support::reader(&kinesis.endpoint(), "scale", None).await;
    let mut listed_before = 2;
    for target in [4usize, 8] {
        support::update_shard_count(&admin, "scale", i32::try_from(target).expect("8 at most"))
            .await;
        let shards = reader.list().await.expect("list").shards;
        assert_eq!(open(&shards).len(), target, "{shards:?}");
        assert!(shards.len() > listed_before, "closed shards are kept");
        // Every closed shard is a parent of some listed shard, every parent
        // named is listed (nothing trimmed yet), and ids are unique.
        let ids: BTreeSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids.len(), shards.len());
        for shard in &shards {
            for parent in shard.parents() {
                assert!(ids.contains(parent.as_str()), "{parent} not listed");
            }
        }
        for closed in shards.iter().filter(|s| s.closed) {
            assert!(
                shards.iter().any(|s| s.parents().contains(&closed.id)),
                "{} has no child",
                closed.id
            );
        }
        assert_tiles_key_space(&shards);
        listed_before = shards.len();
    }
}

#[tokio::test]
async fn pages_through_more_shards_than_one_page() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "wide", 7).await;
    let whole = support::reader(&kinesis.endpoint(), "wide", None)
        .await
        .list()
        .await
        .expect("list");
    assert_eq!(whole.shards.len(), 7);
    assert_eq!(whole.calls, 1);
    for page in [1, 2, 3] {
        let reader = support::reader(&kinesis.endpoint(), "wide", Some(page)).await;
        let paged = reader.list().await.expect("list");
        assert_eq!(paged.shards, whole.shards, "page size {page}");
        let expected_calls = 7u32.div_ceil(page.unsigned_abs());
        // A last full page may need one more (empty) call to learn it was last.
        assert!(
            paged.calls == expected_calls || paged.calls == expected_calls + 1,
            "page {page}: {} calls",
            paged.calls
        );
        assert_eq!(reader.calls(), u64::from(paged.calls));
    }
}

#[tokio::test]
async fn groups_on_one_stream_share_a_reader_and_its_cache() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "shared", 3).await;
    let options = ReaderOptions {
        min_refresh_interval: Duration::from_secs(60),
        ..ReaderOptions::default()
    };
    let registry = ReaderRegistry::new(support::sdk_config().await, options, None);
    let endpoint = kinesis.endpoint();
    let first = registry.reader(
        StreamId::named("shared"),
        Some(support::REGION),
        Some(&endpoint),
    );
    let second = registry.reader(
        StreamId::named("shared"),
        Some(support::REGION),
        Some(&endpoint),
    );
    let other = registry.reader(
        StreamId::named("shared-too"),
        Some(support::REGION),
        Some(&endpoint),
    );
    assert!(Arc::ptr_eq(&first, &second));
    assert!(!Arc::ptr_eq(&first, &other));
    assert_eq!(registry.len(), 2);

    // Ten concurrent refreshes from "different groups" cost one listing.
    let reads = futures::future::join_all((0..10).map(|_| first.topology())).await;
    assert!(
        reads
            .iter()
            .all(|r| r.as_ref().is_ok_and(|t| t.shards.len() == 3))
    );
    assert_eq!(first.calls(), 1);
    let again = second.topology().await.expect("cached");
    assert_eq!(first.calls(), 1);
    assert_eq!(again.shards.len(), 3);

    drop((first, second, again, reads));
    assert_eq!(registry.len(), 1, "a reader goes with its last group");
}

#[tokio::test]
async fn a_missing_stream_is_stream_not_found() {
    let kinesis = support::kinesis();
    let reader = support::reader(&kinesis.endpoint(), "nope", None).await;
    let error = reader.list().await.expect_err("no such stream");
    assert_eq!(error.reason(), "StreamNotFound", "{error}");
    assert_eq!(reader.calls(), 1, "not retried");
}

#[tokio::test]
async fn a_stream_being_resharded_lists_without_flapping() {
    // Resharding takes 1.5 s here, so the stream is seen UPDATING.
    let kinesis = shardring_devkit::emulators::Emulator::start_with(
        shardring_devkit::emulators::EmulatorKind::Kinesis,
        &[("UPDATE_SHARD_COUNT_DURATION", "1500ms")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "busy", 2).await;
    let reader = support::reader(&kinesis.endpoint(), "busy", None).await;
    let before = reader.list().await.expect("list").shards;
    admin
        .update_shard_count()
        .stream_name("busy")
        .target_shard_count(4)
        .scaling_type(aws_sdk_kinesis::types::ScalingType::UniformScaling)
        .send()
        .await
        .expect("UpdateShardCount");
    let status = admin
        .describe_stream_summary()
        .stream_name("busy")
        .send()
        .await
        .expect("summary");
    assert_eq!(
        status
            .stream_description_summary()
            .map(|s| s.stream_status().clone()),
        Some(aws_sdk_kinesis::types::StreamStatus::Updating)
    );
    // Every read while UPDATING succeeds and never loses a shard: it is the
    // old topology or the new one, never an error or a subset.
    let mut seen_new = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let shards = reader
            .list()
            .await
            .expect("ListShards works while UPDATING")
            .shards;
        assert!(
            before
                .iter()
                .all(|old| shards.iter().any(|s| s.id == old.id)),
            "{shards:?}"
        );
        if open(&shards).len() == 4 {
            seen_new = true;
            assert_tiles_key_space(&shards);
            break;
        }
        assert_eq!(open(&shards).len(), 2, "{shards:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen_new, "the new shards appeared");
}
