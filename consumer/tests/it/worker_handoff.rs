//! Two workers on kinesis-local and dynalite, with the test playing the
//! operator (publishing views): a revoked shard is stopped, checkpointed and
//! released within a deadline; the other worker then takes it from the
//! checkpoint with no gap; a worker told to shut down keeps reading until its
//! shards are revoked; a shard read to its end after a split is
//! checkpointed `SHARD_END`. The checker proves no overlap, no loss and
//! per-hold order over everything processed.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardring_consumer::PodView;
use shardring_consumer::check::{self, ProcessedRecord, ProducedRecord};
use shardring_consumer::lease::{Checkpoint, LeaseConfig, LeaseManager, create_table};
use shardring_consumer::reader::{ReaderOptions, Record};
use shardring_consumer::view::{self, ViewPublisher};
use shardring_consumer::worker::{RecordHandler, ShardContext, Worker, WorkerConfig, WorkerReport};
use shardring_devkit::wait::until;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::support;

const STREAM: &str = "events";
const TABLE: &str = "leases";

#[derive(Default)]
struct Collect(Mutex<Vec<ProcessedRecord>>);

impl RecordHandler for Collect {
    async fn handle(&self, context: &ShardContext, records: &[Record]) -> anyhow::Result<()> {
        let mut log = self.0.lock();
        for record in records {
            log.push(ProcessedRecord {
                shard: context.shard.clone(),
                sequence_number: record.sequence_number.clone(),
                partition_key: record.partition_key.clone(),
                pod: context.worker_id.clone(),
                session: context.session,
                time: jiff::Timestamp::now(),
                data: String::from_utf8_lossy(&record.data).into_owned(),
            });
        }
        Ok(())
    }
}

struct Pod {
    publisher: ViewPublisher,
    leases: Arc<LeaseManager>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<WorkerReport>,
}

const FAILOVER: Duration = Duration::from_secs(3);

fn start_pod(
    name: &str,
    kinesis: &aws_sdk_kinesis::Client,
    dynamodb: &aws_sdk_dynamodb::Client,
    log: Arc<Collect>,
) -> Pod {
    let (publisher, view) = view::channel();
    let leases = Arc::new(LeaseManager::new(
        dynamodb.clone(),
        LeaseConfig {
            table: TABLE.into(),
            worker_id: name.into(),
            failover: FAILOVER,
        },
    ));
    let mut config = WorkerConfig::new(STREAM, FAILOVER);
    config.tick = Duration::from_millis(50);
    config.drain_deadline = Duration::from_secs(20);
    config.reader = ReaderOptions {
        limit: 5,
        idle_wait: Duration::from_millis(30),
        ..ReaderOptions::default()
    };
    let worker = Worker::new(kinesis.clone(), leases.clone(), view, log, config);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(worker.run(async move {
        let _ = stopped.await;
    }));
    Pod {
        publisher,
        leases,
        stop: Some(stop),
        task,
    }
}

fn publish(pod: &Pod, epoch: u64, active: &[&str], revoking: &[&str]) {
    pod.publisher.offer(PodView {
        epoch,
        active: active.iter().map(|s| (*s).to_owned()).collect(),
        standby: Vec::new(),
        revoking: revoking.iter().map(|s| (*s).to_owned()).collect(),
        held: Vec::new(),
    });
}

fn processed(log: &Collect) -> Vec<ProcessedRecord> {
    log.0.lock().clone()
}

fn all_processed(log: &Collect, produced: &[ProducedRecord]) -> bool {
    check::check(&processed(log), produced, &BTreeMap::new())
        .lost
        .is_empty()
}

async fn produce(
    client: &aws_sdk_kinesis::Client,
    hash_key: &str,
    tag: &str,
    count: usize,
    into: &mut Vec<ProducedRecord>,
) {
    for (shard, sequence_number) in support::put_records(client, STREAM, hash_key, tag, count).await
    {
        into.push(ProducedRecord {
            shard,
            sequence_number,
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_handoff_drain_and_shard_end() {
    let kinesis_emulator = support::kinesis();
    let dynamo_emulator = support::dynamodb();
    let kinesis = support::kinesis_client(&kinesis_emulator.endpoint()).await;
    let dynamodb = support::dynamodb_client(&dynamo_emulator.endpoint()).await;
    create_table(&dynamodb, TABLE, Duration::from_secs(30))
        .await
        .unwrap();
    support::create_stream(&kinesis, STREAM, 2).await;
    let shards = support::shard_ids(&kinesis, STREAM).await;
    let (s0, s1) = (shards[0].as_str(), shards[1].as_str());
    // Hash keys inside each shard of an even two-way split.
    let (k0, k1) = ("1".to_owned(), (u128::MAX / 2 + 10).to_string());
    let mut produced = Vec::new();
    produce(&kinesis, &k0, "a", 10, &mut produced).await;
    produce(&kinesis, &k1, "b", 10, &mut produced).await;

    let log = Arc::new(Collect::default());
    let mut a = start_pod("pod-a", &kinesis, &dynamodb, log.clone());
    let mut b = start_pod("pod-b", &kinesis, &dynamodb, log.clone());
    publish(&a, 1, &[s0, s1], &[]);
    publish(&b, 1, &[], &[]);
    until(
        "pod-a to read everything",
        Duration::from_secs(30),
        async || all_processed(&log, &produced),
    )
    .await;

    // Move s1 from a to b, two-phase: revoke on a, wait for the release, then
    // activate on b. Records keep arriving throughout.
    produce(&kinesis, &k1, "c", 5, &mut produced).await;
    let revoked_at = Instant::now();
    publish(&a, 2, &[s0], &[s1]);
    until("pod-a to release s1", Duration::from_secs(10), async || {
        let row = a.leases.fetch(s1).await.unwrap().unwrap();
        row.owner.is_none()
    })
    .await;
    let release_time = revoked_at.elapsed();
    assert!(release_time < Duration::from_secs(5), "{release_time:?}");
    assert!(!a.leases.held().contains(&s1.to_owned()));
    produce(&kinesis, &k1, "d", 5, &mut produced).await;
    publish(&b, 3, &[s1], &[]);
    produce(&kinesis, &k1, "e", 5, &mut produced).await;
    produce(&kinesis, &k0, "f", 5, &mut produced).await;
    until(
        "the handoff to catch up",
        Duration::from_secs(30),
        async || all_processed(&log, &produced),
    )
    .await;
    assert!(b.leases.held().contains(&s1.to_owned()));

    // SIGTERM on a: it keeps reading s0 until the operator revokes it.
    a.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!a.task.is_finished(), "a must read on until revoked");
    produce(&kinesis, &k0, "g", 5, &mut produced).await;
    until("a to drain-read", Duration::from_secs(30), async || {
        all_processed(&log, &produced)
    })
    .await;
    publish(&a, 4, &[], &[s0]);
    let report = tokio::time::timeout(Duration::from_secs(10), &mut a.task)
        .await
        .expect("a exits once revoked")
        .unwrap();
    assert!(!report.drain_deadline_passed);
    assert_eq!(report.released, 2);
    assert_eq!(a.leases.fetch(s0).await.unwrap().unwrap().owner, None);

    // b takes s0 over; then s1 is split: b reads s1 to its end and
    // checkpoints SHARD_END.
    publish(&b, 5, &[s0, s1], &[]);
    produce(&kinesis, &k0, "h", 5, &mut produced).await;
    until("b to read s0", Duration::from_secs(30), async || {
        all_processed(&log, &produced)
    })
    .await;
    kinesis
        .split_shard()
        .stream_name(STREAM)
        .shard_to_split(s1)
        .new_starting_hash_key((u128::MAX / 4 * 3).to_string())
        .send()
        .await
        .expect("SplitShard");
    support::wait_active(&kinesis, STREAM).await;
    until("s1 to end", Duration::from_secs(30), async || {
        b.leases.fetch(s1).await.unwrap().unwrap().checkpoint == Some(Checkpoint::ShardEnd)
    })
    .await;
    let row = b.leases.fetch(s1).await.unwrap().unwrap();
    assert_eq!(row.child_shard_ids.len(), 2);
    until(
        "b to release the ended shard",
        Duration::from_secs(10),
        async || !b.leases.held().contains(&s1.to_owned()),
    )
    .await;

    // The operator publishes the children once the parent is complete; the
    // checker proves no child record was processed before the parent ended.
    let children = row.child_shard_ids.clone();
    let (c0, c1) = (children[0].as_str(), children[1].as_str());
    produce(&kinesis, &k1, "i", 5, &mut produced).await;
    produce(
        &kinesis,
        &(u128::MAX - 5).to_string(),
        "j",
        5,
        &mut produced,
    )
    .await;
    publish(&b, 6, &[s0, c0, c1], &[]);
    until(
        "b to read the children",
        Duration::from_secs(30),
        async || all_processed(&log, &produced),
    )
    .await;
    let parents = BTreeMap::from([
        (c0.to_owned(), vec![s1.to_owned()]),
        (c1.to_owned(), vec![s1.to_owned()]),
    ]);

    b.stop.take().unwrap().send(()).unwrap();
    publish(&b, 7, &[], &[s0, c0, c1]);
    let report = tokio::time::timeout(Duration::from_secs(10), &mut b.task)
        .await
        .expect("b exits once revoked")
        .unwrap();
    assert!(report.completed.contains(s1));

    let verdict = check::check(&processed(&log), &produced, &parents);
    assert!(verdict.shards >= 4, "{}", verdict.summary());
    assert!(verdict.passed(), "{}", verdict.summary());
    assert_eq!(verdict.moves, 2, "{}", verdict.summary());
    println!("revoke to release: {release_time:?}; {}", verdict.summary());
    drop(b.publisher);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_lease_stops_the_reader_at_once() {
    let kinesis_emulator = support::kinesis();
    let dynamo_emulator = support::dynamodb();
    let kinesis = support::kinesis_client(&kinesis_emulator.endpoint()).await;
    let dynamodb = support::dynamodb_client(&dynamo_emulator.endpoint()).await;
    create_table(&dynamodb, TABLE, Duration::from_secs(30))
        .await
        .unwrap();
    support::create_stream(&kinesis, STREAM, 1).await;
    let s0 = support::shard_ids(&kinesis, STREAM).await.remove(0);
    let mut produced = Vec::new();
    produce(&kinesis, "1", "a", 5, &mut produced).await;
    let log = Arc::new(Collect::default());
    let mut a = start_pod("pod-a", &kinesis, &dynamodb, log.clone());
    publish(&a, 1, &[&s0], &[]);
    until("pod-a to read", Duration::from_secs(30), async || {
        all_processed(&log, &produced)
    })
    .await;

    // Another writer takes the lease behind the operator's back (a
    // misconfigured KCL app, say): the counter and owner change.
    let row = a.leases.fetch(&s0).await.unwrap().unwrap();
    dynamodb
        .update_item()
        .table_name(TABLE)
        .key(
            "leaseKey",
            aws_sdk_dynamodb::types::AttributeValue::S(s0.clone()),
        )
        .update_expression("SET leaseOwner = :intruder, leaseCounter = :next")
        .expression_attribute_values(
            ":intruder",
            aws_sdk_dynamodb::types::AttributeValue::S("intruder".into()),
        )
        .expression_attribute_values(
            ":next",
            aws_sdk_dynamodb::types::AttributeValue::N((row.counter.unwrap() + 100).to_string()),
        )
        .send()
        .await
        .unwrap();
    until("pod-a to notice", Duration::from_secs(10), async || {
        a.leases.held().is_empty()
    })
    .await;
    let before = processed(&log).len();
    produce(&kinesis, "1", "b", 5, &mut produced).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(processed(&log).len(), before, "read without the lease");
    // Still assigned, pod-a waits for the intruder's lease to expire; it
    // never writes over it meanwhile.
    assert_eq!(
        a.leases.fetch(&s0).await.unwrap().unwrap().owner.as_deref(),
        Some("intruder")
    );
    a.stop.take().unwrap().send(()).unwrap();
    let report = tokio::time::timeout(Duration::from_secs(10), &mut a.task)
        .await
        .expect("a exits: it holds nothing")
        .unwrap();
    assert_eq!(report.lost, 1);
    drop(a.publisher);
}
