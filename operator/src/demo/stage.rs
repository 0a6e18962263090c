//! The embedded stage that `shardring demo` and the embedded scenarios play
//! on: kinesis-local and dynalite with a stream and a KCL lease table, the
//! control loop (the real Kinesis source and pure plan step against the
//! in-process [`Cluster`]), a producer, and consumer pods backed by real
//! reference-consumer processes. It owns the actions a story or scenario
//! takes (add, delete, kill or hang pods; split, merge, UpdateShardCount;
//! restart the controller), the waits on conditions with deadlines, and the
//! end: drain, stop everything, and run the checker. Dropping it stops the
//! control loop and kills every process it started.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use shardring_consumer::check::{self, ProcessedRecord, ProducedRecord};
use shardring_consumer::clients;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::cluster::{Cluster, GroupTiming, NAMESPACE};
use super::consumers::{self, ConsumerSettings};
use super::controller::{self, Shared};
use super::producer::Producer;
use super::report::Verdict;
use super::{DemoError, LEASE_TABLE, REGION, SHARD_GROUP, STREAM, reshard};
use crate::crds::ShardPhase;
use crate::emulators::Emulator;
use crate::lease::LeaseReader;
use crate::source::kinesis::{KinesisShardSource, ReaderOptions, StreamId, TopologyReader};

/// How often the control loop reconciles.
const TICK: Duration = Duration::from_millis(200);
/// How often a wait looks at its condition.
const POLL: Duration = Duration::from_millis(100);
/// The longest any one wait may take before the stage gives up.
pub const STEP_DEADLINE: Duration = Duration::from_secs(90);
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
        lock(&self.shared).cluster.kill_all();
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
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
            stream: STREAM.to_owned(),
            lease_table: LEASE_TABLE.to_owned(),
            shard_group: format!("{NAMESPACE}/{SHARD_GROUP}"),
            kinesis_endpoint: kinesis_url.clone(),
            dynamodb_endpoint: dynamo_url.clone(),
            failover: config.timing.lease_failover,
            drain_deadline: config.drain_deadline,
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

    fn start_control_loop(&mut self, source: Arc<KinesisShardSource>) {
        let stop = self._cleanup.stop.child_token();
        let task = tokio::spawn(controller::run(
            self.shared.clone(),
            source,
            TICK,
            stop.clone(),
        ));
        self.control = Some(ControlLoop { stop, task });
    }

    async fn stop_control_loop(&mut self) {
        if let Some(control) = self.control.take() {
            control.stop.cancel();
            let _ = control.task.await;
        }
    }

    /// The shared state (cluster, topology, leases, move log), locked.
    pub fn state(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
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

    /// Creates pod `name` and starts its consumer.
    pub fn start_pod(&self, name: &str) -> Result<(), DemoError> {
        let mut state = self.state();
        let dir = state.cluster.pod_dir(name);
        std::fs::create_dir_all(&dir)?;
        let annotations = dir.join("annotations");
        // Kubelet creates the projected file before the container starts.
        std::fs::write(&annotations, b"")?;
        let record_log = dir.join("records.jsonl");
        let process =
            self.settings
                .spawn(name, &annotations, &record_log, &dir.join("consumer.log"))?;
        println!(
            "  + pod {name} created and Ready (consumer pid {})",
            process.pid()
        );
        state
            .cluster
            .add_pod(name, annotations, record_log, process, Timestamp::now());
        Ok(())
    }

    /// Deletes pod `name` gracefully (SIGTERM to its consumer).
    pub fn delete_pod(&self, name: &str) {
        let grace = self.grace;
        if self
            .state()
            .cluster
            .delete_pod(name, grace, Timestamp::now())
        {
            println!(
                "  - pod {name} deleted (grace period {} s): its consumer got SIGTERM and drains until revoked",
                grace.as_secs()
            );
        }
    }

    /// kill -9 of pod `name`'s consumer, then a force delete of the pod
    /// object (no grace period, no deletion timestamp ever seen).
    pub fn kill_pod(&self, name: &str) -> Result<(), DemoError> {
        if !self.state().cluster.force_delete(name) {
            return Err(DemoError::Consumer(format!("no pod {name} to kill")));
        }
        println!("  - pod {name}: consumer killed with SIGKILL, pod force-deleted");
        Ok(())
    }

    /// Pod `name`'s consumer hangs (SIGSTOP): it neither reads nor renews
    /// nor releases its leases until [`Self::resume_pod`].
    pub fn hang_pod(&self, name: &str) -> Result<(), DemoError> {
        if !self.state().cluster.signal(name, "STOP") {
            return Err(DemoError::Consumer(format!("no pod {name} to hang")));
        }
        println!("  ! pod {name}: consumer hung (SIGSTOP)");
        Ok(())
    }

    /// Pod `name`'s hung consumer carries on (SIGCONT).
    pub fn resume_pod(&self, name: &str) -> Result<(), DemoError> {
        if !self.state().cluster.signal(name, "CONT") {
            return Err(DemoError::Consumer(format!("no pod {name} to resume")));
        }
        println!("  ! pod {name}: consumer resumed (SIGCONT)");
        Ok(())
    }

    /// Waits until `condition` holds (checked every [`POLL`]), failing
    /// after [`STEP_DEADLINE`] or as soon as a consumer died unasked.
    pub async fn wait_for(
        &self,
        what: &str,
        condition: impl Fn(&Shared) -> bool,
    ) -> Result<(), DemoError> {
        let started = Instant::now();
        loop {
            {
                let state = self.state();
                if let Some(problem) = state.problems.first() {
                    return Err(DemoError::Consumer(problem.clone()));
                }
                if condition(&state) {
                    return Ok(());
                }
            }
            if started.elapsed() >= STEP_DEADLINE {
                return Err(DemoError::Timeout {
                    what: what.to_owned(),
                    after: STEP_DEADLINE,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the assignment is settled and balanced for the live pods
    /// and covers every shard ListShards reports open now, and every owner
    /// has read a record.
    pub async fn wait_settled(&self, what: &str) -> Result<(), DemoError> {
        let open = reshard::open_shards(&self.kinesis, STREAM).await?;
        self.wait_for(what, |s| {
            s.settled() && s.load_spread() <= 1 && every_owner_reading(s) && covers(s, &open)
        })
        .await
    }

    /// Waits until `records` more records have been processed than now.
    pub async fn traffic(&self, records: usize) -> Result<(), DemoError> {
        let logs = || self.state().cluster.record_logs.clone();
        let start = read_logs(&logs())?.len();
        let started = Instant::now();
        loop {
            let now = read_logs(&logs())?.len();
            if now >= start + records {
                return Ok(());
            }
            if started.elapsed() >= STEP_DEADLINE {
                return Err(DemoError::Timeout {
                    what: format!("{records} more records processed ({} so far)", now - start),
                    after: STEP_DEADLINE,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Readable (active or revoking) shards in the published document.
    pub fn readable_shards(&self) -> usize {
        self.state().cluster.published.as_ref().map_or(0, |doc| {
            doc.shards
                .values()
                .filter(|r| r.state == ShardPhase::Active || r.state == ShardPhase::Revoking)
                .count()
        })
    }

    /// Restarts the controller: the control loop stops, everything it kept
    /// in memory (topology, lease snapshot, the source's caches, the memory
    /// of departed pods) is lost, and a new loop starts from what the
    /// cluster holds (the published document, the ShardGroup's status, the
    /// pods), as a new operator process would.
    pub async fn restart_controller(&mut self) {
        self.stop_control_loop().await;
        {
            let mut state = self.state();
            state.topology = None;
            state.topology_read_at = None;
            state.leases = None;
            // The new controller's pod watch lists the pods when it starts:
            // it has seen no pod leave before that.
            let departed = crate::controller::observe::departed::Departed::default();
            departed.listed(Timestamp::now());
            state.cluster.departed = departed;
        }
        println!("  ! controller stopped; a new one starts from the published state");
        let source = source(&self.sdk, &self.kinesis_url, &self.dynamo_url);
        self.start_control_loop(source);
    }

    /// The open shard with the widest hash key range (the next to split).
    pub async fn widest_open(&self) -> Result<reshard::StreamShard, DemoError> {
        reshard::widest_open(&self.kinesis, STREAM).await
    }

    /// SplitShard of `parent` in half.
    pub async fn split(&self, parent: &reshard::StreamShard) -> Result<(), DemoError> {
        reshard::split_in_half(&self.kinesis, STREAM, parent).await?;
        println!("  SplitShard {}", super::report::short(&parent.id));
        Ok(())
    }

    /// The published owner of `shard`, if any.
    pub fn owner_of(&self, shard: &str) -> Option<String> {
        let state = self.state();
        let doc = state.cluster.published.as_ref()?;
        doc.shards.get(shard)?.owner.clone()
    }

    /// MergeShards of the first two adjacent open shards.
    pub async fn merge_adjacent(&self) -> Result<(String, String), DemoError> {
        let (a, b) = reshard::merge_adjacent(&self.kinesis, STREAM).await?;
        println!(
            "  MergeShards {} + {}",
            super::report::short(&a),
            super::report::short(&b)
        );
        Ok((a, b))
    }

    /// UpdateShardCount to `target` (uniform scaling).
    pub async fn update_shard_count(&self, target: u32) -> Result<(), DemoError> {
        reshard::update_shard_count(&self.kinesis, STREAM, target).await?;
        println!("  UpdateShardCount to {target}");
        Ok(())
    }

    /// Stops the producer, waits until every record it wrote was processed
    /// (or the deadline passed: the checker then lists what is missing),
    /// stops the control loop and every consumer, and runs the checker.
    /// `rolling_shards` is what the verdict divides rolling-deploy moves by.
    pub async fn finish(mut self, rolling_shards: usize) -> Result<Verdict, DemoError> {
        let (produced, failures) = match self.producer.take() {
            Some(producer) => producer.stop().await,
            None => (Vec::new(), 0),
        };
        if failures > 0 {
            println!(
                "  producer: {failures} PutRecords calls or entries failed (not expected back)"
            );
        }
        let logs = self.state().cluster.record_logs.clone();
        wait_all_processed(&logs, &produced).await?;
        self.stop_control_loop().await;
        let parents = reshard::parents(&self.kinesis, STREAM).await?;
        let (handoffs_by_phase, problems) = {
            let mut state = self.state();
            state.cluster.kill_all();
            (state.handoffs_by_phase(), state.problems.clone())
        };
        println!(
            "  consumers stopped; running the checker over {} record logs",
            logs.len()
        );
        let processed = read_logs(&logs)?;
        let report = check::check(&processed, &produced, &parents);
        Ok(Verdict {
            check: report,
            handoffs_by_phase,
            rolling_shards,
            problems,
            elapsed: self.started.elapsed(),
        })
    }
}

/// The operator's own source and lease reader on the emulators, as
/// `shardring run` builds them (fresh caches each time).
fn source(
    sdk: &aws_config::SdkConfig,
    kinesis_url: &str,
    dynamo_url: &str,
) -> Arc<KinesisShardSource> {
    let reader = TopologyReader::new(
        crate::source::kinesis::kinesis_client(sdk, Some(REGION), Some(kinesis_url)),
        StreamId::named(STREAM),
        ReaderOptions {
            min_refresh_interval: Duration::from_millis(300),
            ..ReaderOptions::default()
        },
        None,
    );
    let leases = LeaseReader::new(
        crate::lease::dynamodb_client(sdk, Some(REGION), Some(dynamo_url)),
        LEASE_TABLE,
        Some(STREAM.to_owned()),
        None,
    );
    Arc::new(KinesisShardSource::new(
        Arc::new(reader),
        Some(Arc::new(leases)),
    ))
}

/// Whether every live pod that holds active shards has processed a record.
pub fn every_owner_reading(state: &Shared) -> bool {
    let Some(doc) = &state.cluster.published else {
        return false;
    };
    state.cluster.pods.values().all(|pod| {
        let holds = doc
            .pods
            .get(&pod.info.name)
            .is_some_and(|p| !p.active.is_empty());
        !holds
            || std::fs::metadata(&pod.record_log)
                .map(|m| m.len() > 0)
                .unwrap_or(false)
    })
}

/// Whether every shard of `open` is active in the published document.
fn covers(state: &Shared, open: &[String]) -> bool {
    state.cluster.published.as_ref().is_some_and(|doc| {
        open.iter().all(|id| {
            doc.shards
                .get(id)
                .is_some_and(|r| r.state == ShardPhase::Active)
        })
    })
}

/// Every whole line of the record logs.
pub fn read_logs(logs: &[PathBuf]) -> Result<Vec<ProcessedRecord>, DemoError> {
    let mut processed = Vec::new();
    for path in logs {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error.into()),
        };
        // A consumer killed mid-write may leave a torn last line: only whole
        // lines count (its records are then not processed, and show as lost).
        let whole = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        processed.extend(check::parse_log(whole).map_err(|e| DemoError::Log {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?);
    }
    Ok(processed)
}

/// Waits until every produced record appears in some log.
async fn wait_all_processed(
    logs: &[PathBuf],
    produced: &[ProducedRecord],
) -> Result<(), DemoError> {
    let started = Instant::now();
    loop {
        let processed = read_logs(logs)?;
        let seen: HashSet<(&str, &str)> = processed
            .iter()
            .map(|r| (r.shard.as_str(), r.sequence_number.as_str()))
            .collect();
        let missing = produced
            .iter()
            .filter(|p| !seen.contains(&(p.shard.as_str(), p.sequence_number.as_str())))
            .count();
        if missing == 0 {
            println!("  all {} produced records processed", produced.len());
            return Ok(());
        }
        if started.elapsed() >= STEP_DEADLINE {
            println!("  {missing} records still unprocessed; the checker will list them");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The published document's shards by phase (for scenario assertions).
pub fn shards_in(state: &Shared, phase: ShardPhase) -> BTreeMap<String, Option<String>> {
    state
        .cluster
        .published
        .as_ref()
        .map(|doc| {
            doc.shards
                .iter()
                .filter(|(_, r)| r.state == phase)
                .map(|(id, r)| (id.clone(), r.owner.clone()))
                .collect()
        })
        .unwrap_or_default()
}
