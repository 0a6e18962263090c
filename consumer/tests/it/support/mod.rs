//! Test harness for the consumer's integration tests: kinesis-local and
//! dynalite started by the devkit's launcher (the one every crate's tests
//! use; it does not depend on the operator, so neither does this crate),
//! streams and records on them, the assignment document file, the checker's
//! report, and the consumer processes the process-level tests run (the
//! reference consumer binary), killed on drop.

pub mod endpoint;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use shardring_consumer::check::{self, CheckReport, ProducedRecord};
use shardring_consumer::clients;
use shardring_consumer::lease::{LeaseConfig, LeaseManager, create_table};
use shardring_consumer::view::file::write_atomically;
use shardring_crds::assignment::{AssignmentDocument, PodAssignment};
use shardring_devkit::emulators::Emulator;
use shardring_devkit::wait::until;

/// Region every test uses.
pub const REGION: &str = "us-east-1";

/// Starts kinesis-local, failing the test with the emulator's log if it cannot.
pub fn kinesis() -> Emulator {
    Emulator::start_kinesis().unwrap_or_else(|e| panic!("{e}"))
}

/// Starts dynalite.
pub fn dynamodb() -> Emulator {
    Emulator::start_dynamodb().unwrap_or_else(|e| panic!("{e}"))
}

/// A DynamoDB client for `endpoint`.
pub async fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    clients::dynamodb_client(
        &clients::sdk_config(Some(REGION), true).await,
        Some(endpoint),
    )
}

/// A Kinesis client for `endpoint`.
pub async fn kinesis_client(endpoint: &str) -> aws_sdk_kinesis::Client {
    clients::kinesis_client(
        &clients::sdk_config(Some(REGION), true).await,
        Some(endpoint),
    )
}

/// Creates a stream of `shards` shards and waits for ACTIVE.
pub async fn create_stream(client: &aws_sdk_kinesis::Client, stream: &str, shards: i32) {
    client
        .create_stream()
        .stream_name(stream)
        .shard_count(shards)
        .send()
        .await
        .expect("CreateStream");
    wait_active(client, stream).await;
}

/// Waits until `stream` is ACTIVE (the devkit's wait), failing the test
/// after 30 s.
pub async fn wait_active(client: &aws_sdk_kinesis::Client, stream: &str) {
    shardring_devkit::stream::wait_active(client, stream, Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Open shard ids of `stream`, sorted.
pub async fn shard_ids(client: &aws_sdk_kinesis::Client, stream: &str) -> Vec<String> {
    let out = client
        .list_shards()
        .stream_name(stream)
        .send()
        .await
        .expect("ListShards");
    let mut ids: Vec<String> = out
        .shards()
        .iter()
        .map(|s| s.shard_id().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Puts `count` records with partition keys `key-<i>` and payloads `<tag>-<i>`
/// onto `shard` (an explicit hash key inside it); returns their sequence numbers.
pub async fn put_records(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    hash_key: &str,
    tag: &str,
    count: usize,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for i in 0..count {
        let put = client
            .put_record()
            .stream_name(stream)
            .partition_key(format!("key-{i}"))
            .explicit_hash_key(hash_key)
            .data(aws_sdk_kinesis::primitives::Blob::new(format!("{tag}-{i}")))
            .send()
            .await
            .expect("PutRecord");
        out.push((put.shard_id().to_owned(), put.sequence_number().to_owned()));
    }
    out
}

/// Writes the assignment document of `shard_group` at `epoch` to `path` (as
/// the mounted ConfigMap file), each pod with its active and revoking shards.
pub fn publish(path: &Path, shard_group: &str, epoch: u64, pods: &[(&str, &[&str], &[&str])]) {
    let mut document = AssignmentDocument::new(shard_group, epoch);
    for (pod, active, revoking) in pods {
        document.pods.insert(
            (*pod).to_owned(),
            PodAssignment {
                active: active.iter().map(|s| (*s).to_owned()).collect(),
                standby: Vec::new(),
                revoking: revoking.iter().map(|s| (*s).to_owned()).collect(),
                held: Vec::new(),
            },
        );
    }
    write_atomically(path, &serde_json::to_vec(&document).unwrap()).unwrap();
}

/// Polls `condition` until it holds; fails the test after 30 s.
pub async fn wait_until(what: &str, condition: impl AsyncFnMut() -> bool) {
    until(what, Duration::from_secs(30), condition).await;
}

/// Waits until the record log at `log` holds every record of `produced`.
pub async fn wait_all_read(what: &str, log: &Path, produced: &[ProducedRecord]) {
    wait_until(what, async || report(log, produced).lost.is_empty()).await;
}

/// Waits until `shard`'s lease has no owner, as `observer` reads it.
pub async fn wait_released(what: &str, observer: &LeaseManager, shard: &str) {
    wait_until(what, async || {
        observer
            .fetch(shard)
            .await
            .unwrap()
            .is_some_and(|lease| lease.owner.is_none())
    })
    .await;
}

/// The checker's report over the record log at `log` (missing = empty).
pub fn report(log: &Path, produced: &[ProducedRecord]) -> CheckReport {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines = check::parse_log(&text).expect("log lines parse");
    check::check(&lines, produced, &Default::default())
}

/// Puts `count` records tagged `tag` at `hash_key` and remembers them.
pub async fn produce(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    hash_key: &str,
    tag: &str,
    count: usize,
    produced: &mut Vec<ProducedRecord>,
) {
    for (shard, sequence_number) in put_records(client, stream, hash_key, tag, count).await {
        produced.push(ProducedRecord {
            shard,
            sequence_number,
        });
    }
}

/// Emulators with a KCL lease table and a stream, clients for both, a lease
/// observer and a scratch directory: what the process-level tests start from.
pub struct Setup {
    /// kinesis-local's endpoint.
    pub kinesis_url: String,
    /// dynalite's endpoint.
    pub dynamo_url: String,
    /// Kinesis client.
    pub kinesis: aws_sdk_kinesis::Client,
    /// The stream's shard ids, in ListShards order.
    pub shards: Vec<String>,
    /// A lease manager that only reads (worker `observer`).
    pub observer: LeaseManager,
    /// Scratch directory of this test (views, logs).
    pub dir: PathBuf,
    // Last: the emulators outlive the clients above.
    _emulators: (Emulator, Emulator),
}

/// Starts the emulators, creates lease table `table` and a `shards`-shard
/// `stream`, and a scratch directory named after `name`.
pub async fn setup(stream: &str, table: &str, shards: i32, name: &str) -> Setup {
    let (kinesis_emulator, dynamo_emulator) = (kinesis(), dynamodb());
    let (kinesis_url, dynamo_url) = (kinesis_emulator.endpoint(), dynamo_emulator.endpoint());
    let kinesis = kinesis_client(&kinesis_url).await;
    let dynamodb = dynamodb_client(&dynamo_url).await;
    create_table(&dynamodb, table, Duration::from_secs(30))
        .await
        .unwrap();
    create_stream(&kinesis, stream, shards).await;
    let shards = shard_ids(&kinesis, stream).await;
    let observer = LeaseManager::new(
        dynamodb,
        LeaseConfig {
            table: table.into(),
            worker_id: "observer".into(),
            failover: Duration::from_secs(3),
        },
    );
    let dir = std::env::temp_dir().join(format!(
        "shardring-{name}-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    Setup {
        kinesis_url,
        dynamo_url,
        kinesis,
        shards,
        observer,
        dir,
        _emulators: (kinesis_emulator, dynamo_emulator),
    }
}

/// A consumer process of a test; killed (and reaped) on drop.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    /// Sends SIGTERM, as the kubelet does on a graceful deletion.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status()
            .expect("kill -TERM");
        assert!(status.success());
    }

    /// Waits for the process to exit; fails the test after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "process did not exit in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Where the consumer processes of a test read and write: the emulators,
/// the stream and lease table, the document file they watch and the record
/// log they share.
pub struct Consumers<'a> {
    /// kinesis-local's endpoint.
    pub kinesis_url: &'a str,
    /// dynalite's endpoint.
    pub dynamo_url: &'a str,
    /// The stream.
    pub stream: &'a str,
    /// The lease table.
    pub table: &'a str,
    /// The assignment document file (as a mounted ConfigMap).
    pub view: &'a Path,
    /// The shared record log.
    pub log: &'a Path,
}

impl Consumers<'_> {
    /// The arguments both the reference consumer and the Python example
    /// take: the pod's name and where it reads and writes.
    pub fn args(&self, pod: &str) -> Vec<OsString> {
        let mut args: Vec<OsString> = [
            "--pod",
            pod,
            "--stream",
            self.stream,
            "--lease-table",
            self.table,
            "--kinesis-endpoint",
            self.kinesis_url,
            "--dynamodb-endpoint",
            self.dynamo_url,
            "--view-file",
        ]
        .map(OsString::from)
        .into();
        args.extend([self.view.into(), "--log".into(), self.log.into()]);
        args
    }

    /// Starts the reference consumer binary as `pod`: polling every 50 ms,
    /// a 3 s lease failover, a 20 s drain deadline after SIGTERM; its stderr
    /// goes next to the log (`<log>.<pod>.stderr`).
    pub fn reference(&self, pod: &str) -> Process {
        let stderr =
            std::fs::File::create(self.log.with_extension(format!("{pod}.stderr"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_shardring-reference-consumer"))
            .args(self.args(pod))
            .args([
                "--poll-ms",
                "50",
                "--idle-ms",
                "50",
                "--failover-ms",
                "3000",
                "--drain-deadline-ms",
                "20000",
            ])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start the reference consumer");
        Process(child)
    }
}

/// Declares durable `queues` on the broker at `url` (with its vhost) and
/// publishes messages `seqs` to each, persistent, with the sequence number
/// as `message_id`, waiting for the broker's confirms; returns them.
pub async fn publish_to_queues(
    url: &str,
    queues: &[&str],
    seqs: std::ops::RangeInclusive<u64>,
) -> Vec<ProducedRecord> {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;
    use lapin::{BasicProperties, Connection, ConnectionProperties};

    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut produced = Vec::new();
    for queue in queues {
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        channel
            .queue_declare((*queue).into(), durable, FieldTable::default())
            .await
            .unwrap();
        for seq in seqs.clone() {
            let properties = BasicProperties::default()
                .with_message_id(seq.to_string().into())
                .with_delivery_mode(2);
            let body = format!("{queue}-{seq}");
            channel
                .basic_publish(
                    "".into(),
                    (*queue).into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    properties,
                )
                .await
                .unwrap();
            produced.push(ProducedRecord {
                shard: (*queue).into(),
                sequence_number: seq.to_string(),
            });
        }
    }
    channel.wait_for_confirms().await.unwrap();
    let _ = connection.close(200, "published".into()).await;
    produced
}
