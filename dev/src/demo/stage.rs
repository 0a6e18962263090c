//! The embedded stage that `shardring-dev demo` and the embedded scenarios play
//! on: kinesis-local and dynalite with a stream and a KCL lease table, the
//! control loop (the core's reconcile [`cycle`](shardring_core::cycle())
//! with the real Kinesis source and lease reader against the in-process
//! [`Cluster`]), a producer, and consumer pods backed by real
//! reference-consumer processes. This module sets the stage up and owns
//! what it holds; dropping it stops the control loop and kills every
//! process it started. The rest is split by concern:
//! - `control`: the control loop, a controller restart;
//! - `source`: the operator's source on the emulators;
//! - `pods`: add, delete, kill, hang and resume consumer pods;
//! - `stream`: split, merge, UpdateShardCount;
//! - `conditions`: a wait on the shared state with a deadline, and what it
//!   asks of the published document, for the stage and the other demos;
//! - `waits`: the stage's waits (a condition, a settled assignment, more
//!   records) and the published owners and phases;
//! - `finish`: drain, stop everything, and run the checker.

mod conditions;
mod control;
mod finish;
mod pods;
mod source;
mod stream;
mod waits;

use parking_lot::{Mutex, MutexGuard};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardring_consumer::clients;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use conditions::{STEP_DEADLINE, shards_in};
pub(crate) use conditions::{every_owner_reading, wait_on};

use super::cluster::{Cluster, GroupTiming};
use super::consumers::{self, ConsumerSettings};
use super::controller::{self, Shared};
use super::producer::Producer;
use super::{DemoError, LEASE_TABLE, REGION, SHARD_GROUP, STREAM};
use shardring_devkit::emulators::Emulator;
use shardring_devkit::stream::reshard;
use source::source;

/// Records per PutRecords call, and calls per second.
pub const BATCH: usize = 10;
/// The pause between PutRecords calls.
pub const BATCH_INTERVAL: Duration = Duration::from_millis(100);

/// What the stage is set up with.
#[derive(Debug, Clone)]
pub struct StageConfig {
    /// Shards of the stream at the start.
    pub shards: u32,
    /// Drain timeout, lease failover and rebalance delay of the ShardGroup.
    pub timing: GroupTiming,
    /// How long a SIGTERMed consumer keeps reading while it waits for its
    /// revoke (kubelet's grace period is this plus 5 s).
    pub drain_deadline: Duration,
    /// The reference consumer binary (default: found or built, see
    /// [`consumers::locate`]).
    pub consumer_binary: Option<PathBuf>,
}

/// Stops the control loop and kills every consumer when dropped, so an
/// error or Ctrl-C anywhere leaves nothing running.
struct Cleanup {
    shared: Arc<Mutex<Shared>>,
    stop: CancellationToken,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.stop.cancel();
        self.shared.lock().cluster.kill_all();
    }
}

/// The running control loop: its task and the token that stops it.
struct ControlLoop {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The emulators, the control loop, the producer and the consumer pods.
pub struct Stage {
    /// When the stage was ready to start (after the consumer binary was found).
    pub started: Instant,
    shared: Arc<Mutex<Shared>>,
    settings: ConsumerSettings,
    grace: Duration,
    sdk: aws_config::SdkConfig,
    kinesis: aws_sdk_kinesis::Client,
    kinesis_url: String,
    dynamo_url: String,
    control: Option<ControlLoop>,
    producer: Option<Producer>,
    // Dropped after the consumers (field order): they stop, then the
    // emulators they talk to.
    _cleanup: Cleanup,
    _emulators: (Emulator, Emulator),
}

impl Stage {
    /// Sets everything up with files under `dir` and starts the control
    /// loop and the producer (no pods yet).
    pub async fn start(config: &StageConfig, dir: &Path) -> Result<Self, DemoError> {
        let explicit = config.consumer_binary.clone();
        let binary = tokio::task::spawn_blocking(move || consumers::locate(explicit.as_deref()))
            .await
            .map_err(|e| DemoError::Consumer(e.to_string()))??;
        // The clock starts once the consumer binary is there (a first build
        // is not part of the run).
        let started = Instant::now();
        println!(
            "starting kinesis-local and dynalite (installed with npm into e2e/node_modules if missing)"
        );
        let (kinesis_emulator, dynamo_emulator) = tokio::task::spawn_blocking(|| {
            Ok::<_, DemoError>((Emulator::start_kinesis()?, Emulator::start_dynamodb()?))
        })
        .await
        .map_err(|e| DemoError::Aws(e.to_string()))??;
        let (kinesis_url, dynamo_url) = (kinesis_emulator.endpoint(), dynamo_emulator.endpoint());
        let sdk = clients::sdk_config(Some(REGION), true).await;
        let kinesis = clients::kinesis_client(&sdk, Some(&kinesis_url));
        let dynamodb = clients::dynamodb_client(&sdk, Some(&dynamo_url));
        reshard::create_stream(&kinesis, STREAM, config.shards).await?;
        shardring_consumer::lease::create_table(&dynamodb, LEASE_TABLE, Duration::from_secs(30))
            .await
            .map_err(|e| DemoError::Aws(e.to_string()))?;
        println!(
            "stream {STREAM} ({} shards) on {kinesis_url}, lease table {LEASE_TABLE} on {dynamo_url}",
            config.shards
        );

        let source = source(&sdk, &kinesis_url, &dynamo_url);
        let cluster = Cluster::new(SHARD_GROUP, STREAM, LEASE_TABLE, config.timing, dir);
        let shared = Arc::new(Mutex::new(Shared::new(
            cluster,
            controller::describe(&source),
        )));
        let cleanup_stop = CancellationToken::new();
        let settings = ConsumerSettings {
            binary,
            region: REGION.to_owned(),
            stream: STREAM.to_owned(),
            lease_table: LEASE_TABLE.to_owned(),
            kinesis_endpoint: kinesis_url.clone(),
            dynamodb_endpoint: dynamo_url.clone(),
            failover: config.timing.lease_failover,
            drain_deadline: config.drain_deadline,
            kubeconfig: None,
        };
        let producer = Producer::start(kinesis.clone(), STREAM.to_owned(), BATCH, BATCH_INTERVAL);
        println!(
            "producer: {} records/s over {} partition keys",
            BATCH as u128 * 1000 / BATCH_INTERVAL.as_millis(),
            super::producer::PARTITION_KEYS
        );
        let mut stage = Self {
            started,
            shared: shared.clone(),
            settings,
            grace: config.drain_deadline + Duration::from_secs(5),
            sdk,
            kinesis,
            kinesis_url,
            dynamo_url,
            control: None,
            producer: Some(producer),
            _cleanup: Cleanup {
                shared,
                stop: cleanup_stop,
            },
            _emulators: (kinesis_emulator, dynamo_emulator),
        };
        stage.start_control_loop(source);
        Ok(stage)
    }

    /// The shared state (cluster, topology, leases, move log), locked.
    pub fn state(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock()
    }

    /// The Kinesis client on kinesis-local.
    pub fn kinesis(&self) -> &aws_sdk_kinesis::Client {
        &self.kinesis
    }

    /// Kubelet's grace period for a graceful deletion.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Starts a new phase (moves are counted per phase) and prints its title.
    pub fn phase(&self, phase: &'static str, title: &str) {
        self.state().phase = phase;
        println!(
            "\n== [{:>5.1} s] {title}",
            self.started.elapsed().as_secs_f64()
        );
    }
}
