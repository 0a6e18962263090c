//! Test harness for the consumer's integration tests: starts kinesis-local
//! and dynalite (pinned in `e2e/package.json`, installed there with npm on
//! first use under a file lock) on free loopback ports, waits for the port,
//! and kills them by pid on drop. A small copy of the operator's harness so
//! this crate does not depend on the operator.

use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shardring_consumer::check::{self, CheckReport, ProducedRecord};
use shardring_consumer::clients;
use shardring_consumer::lease::{LeaseConfig, LeaseManager, create_table};
use shardring_consumer::view::file::write_atomically;
use shardring_crds::assignment::{AssignmentDocument, PodAssignment};

/// Region every test uses.
pub const REGION: &str = "us-east-1";

/// A running emulator; killed on drop.
pub struct Emulator {
    child: Child,
    port: u16,
}

impl Emulator {
    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("e2e")
}

fn installed(dir: &Path) -> bool {
    let modules = dir.join("node_modules");
    modules.join("kinesis-local/main.js").is_file()
        && modules.join("kinesis-local/server.json").is_file()
        && modules.join("dynalite/cli.js").is_file()
}

fn ensure_installed() -> PathBuf {
    let dir = e2e_dir();
    if installed(&dir) {
        return dir;
    }
    let lock_dir = dir.join(".emulators");
    std::fs::create_dir_all(&lock_dir).expect("lock dir");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_dir.join("install.lock"))
        .expect("install lock");
    lock.lock().expect("take install lock");
    if !installed(&dir) {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .stdin(Stdio::null())
            .status()
            .expect("run npm (is Node.js installed?)");
        assert!(status.success(), "npm ci in {} failed", dir.display());
    }
    dir
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn start(kinesis: bool) -> Emulator {
    let dir = ensure_installed();
    let modules = dir.join("node_modules");
    for _ in 0..3 {
        let port = free_port();
        let name = if kinesis { "kinesis-local" } else { "dynalite" };
        let log = std::env::temp_dir().join(format!("shardring-consumer-{name}-{port}.log"));
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new("node");
        if kinesis {
            let package = modules.join("kinesis-local");
            command
                .arg(package.join("main.js"))
                .current_dir(&package)
                .env("KINESIS_MOCK_PLAIN_PORT", port.to_string())
                .env("KINESIS_MOCK_TLS_PORT", free_port().to_string())
                .env("KINESIS_MOCK_CERT_PATH", package.join("server.json"))
                .env("SHOULD_PERSIST_DATA", "false")
                .env("LOAD_DATA_IF_EXISTS", "false")
                .env("AWS_REGION", REGION)
                .env("LOG_LEVEL", "WARN");
            for duration in [
                "CREATE_STREAM_DURATION",
                "DELETE_STREAM_DURATION",
                "SPLIT_SHARD_DURATION",
                "MERGE_SHARDS_DURATION",
                "UPDATE_SHARD_COUNT_DURATION",
            ] {
                command.env(duration, "0ms");
            }
        } else {
            command
                .arg(modules.join("dynalite/cli.js"))
                .current_dir(&dir)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args([
                    "--createTableMs",
                    "0",
                    "--deleteTableMs",
                    "0",
                    "--updateTableMs",
                    "0",
                ]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("run node");
        let deadline = Instant::now() + Duration::from_secs(60);
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Emulator { child, port };
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("emulator did not start (see shardring-consumer-*.log in the temp dir)");
}

/// Starts kinesis-local.
pub fn kinesis() -> Emulator {
    start(true)
}

/// Starts dynalite.
pub fn dynamodb() -> Emulator {
    start(false)
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

/// Waits until `stream` is ACTIVE.
pub async fn wait_active(client: &aws_sdk_kinesis::Client, stream: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
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
        if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
            return;
        }
        assert!(Instant::now() < deadline, "stream {stream} not ACTIVE");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
            },
        );
    }
    write_atomically(path, &serde_json::to_vec(&document).unwrap()).unwrap();
}

/// Polls `condition` every 25 ms; fails the test after 30 s.
pub async fn wait_until(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
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
