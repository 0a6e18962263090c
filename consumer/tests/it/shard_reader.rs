//! The shard reader against kinesis-local: reads a shard from TRIM_HORIZON
//! to its end after a split (end seen from the response, children reported),
//! resumes after a checkpoint without repeating or skipping, and the lease
//! records `SHARD_END` with the children.

use std::time::Duration;

use shardring_consumer::PodView;
use shardring_consumer::lease::{Checkpoint, LeaseConfig, LeaseManager, TakeOutcome, create_table};
use shardring_consumer::reader::{ReaderOptions, ShardReader};
use shardring_consumer::view;

use crate::support;

const STREAM: &str = "orders";

fn options() -> ReaderOptions {
    ReaderOptions {
        limit: 7,
        idle_wait: Duration::from_millis(20),
        ..ReaderOptions::default()
    }
}

/// Reads until `count` records arrived or the shard ended.
async fn read(reader: &mut ShardReader, count: usize) -> (Vec<String>, Option<Vec<String>>) {
    let mut sequences = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let batch = reader.next_batch().await.expect("GetRecords");
        sequences.extend(batch.records.iter().map(|r| r.sequence_number.clone()));
        if batch.shard_end.is_some() {
            return (sequences, batch.shard_end);
        }
        if sequences.len() >= count {
            return (sequences, None);
        }
        assert!(std::time::Instant::now() < deadline, "timed out reading");
        if batch.records.is_empty() {
            reader.idle().await;
        }
    }
}

#[tokio::test]
async fn reads_to_shard_end_after_a_split_and_checkpoints_it() {
    let kinesis = support::kinesis();
    let dynamo = support::dynamodb();
    let client = support::kinesis_client(&kinesis.endpoint()).await;
    support::create_stream(&client, STREAM, 1).await;
    let parent = support::shard_ids(&client, STREAM).await.remove(0);
    let first = support::put_records(&client, STREAM, "1", "before", 20).await;
    assert!(first.iter().all(|(shard, _)| *shard == parent));
    let produced: Vec<String> = first.iter().map(|(_, seq)| seq.clone()).collect();

    // Read part of the shard, remembering where we stopped.
    let mut reader = ShardReader::open(client.clone(), STREAM, &parent, None, options())
        .await
        .unwrap();
    let (head, end) = read(&mut reader, 8).await;
    assert_eq!(end, None);
    assert!(head.len() >= 8);
    assert_eq!(head, produced[..head.len()]);
    let checkpoint = Checkpoint::Sequence(head[7].clone());

    // Split the shard: it closes; new records go to the children.
    client
        .split_shard()
        .stream_name(STREAM)
        .shard_to_split(&parent)
        .new_starting_hash_key((u128::MAX / 2).to_string())
        .send()
        .await
        .expect("SplitShard");
    support::wait_active(&client, STREAM).await;
    let after = support::put_records(&client, STREAM, "1", "after", 5).await;
    assert!(after.iter().all(|(shard, _)| *shard != parent));

    // Resume after the checkpoint: the rest in order, then the end.
    let mut resumed = ShardReader::open(
        client.clone(),
        STREAM,
        &parent,
        Some(&checkpoint),
        options(),
    )
    .await
    .unwrap();
    let (rest, end) = read(&mut resumed, usize::MAX).await;
    assert_eq!(rest, produced[8..]);
    let children = end.expect("shard end");
    assert_eq!(children.len(), 2, "{children:?}");
    assert!(resumed.is_ended());
    assert!(resumed.next_batch().await.is_err());
    assert_eq!(
        resumed.position(),
        &Checkpoint::Sequence(produced[19].clone())
    );

    // A reader opened at SHARD_END is at its end at once.
    let done = ShardReader::open(
        client.clone(),
        STREAM,
        &parent,
        Some(&Checkpoint::ShardEnd),
        options(),
    )
    .await
    .unwrap();
    assert!(done.is_ended());

    // From TRIM_HORIZON the whole parent, then SHARD_END checkpointed.
    let mut full = ShardReader::open(client.clone(), STREAM, &parent, None, options())
        .await
        .unwrap();
    let (all, end) = read(&mut full, usize::MAX).await;
    assert_eq!(all, produced);
    let children = end.unwrap();

    let dynamodb = support::dynamodb_client(&dynamo.endpoint()).await;
    create_table(&dynamodb, "leases", Duration::from_secs(30))
        .await
        .unwrap();
    let leases = LeaseManager::new(
        dynamodb,
        LeaseConfig {
            table: "leases".into(),
            worker_id: "pod-a".into(),
            failover: Duration::from_secs(10),
        },
    );
    let (publisher, view) = view::channel();
    publisher.offer(PodView {
        epoch: 1,
        active: vec![parent.clone()],
        ..PodView::default()
    });
    assert!(matches!(
        leases.take(&parent, &view).await.unwrap(),
        TakeOutcome::Taken(_)
    ));
    leases
        .checkpoint_shard_end(&parent, &children)
        .await
        .unwrap();
    let row = leases.fetch(&parent).await.unwrap().unwrap();
    assert_eq!(row.checkpoint, Some(Checkpoint::ShardEnd));
    assert_eq!(row.child_shard_ids, children);
}
