//! The demo's story, step by step: set up the emulators, the stream and the
//! lease table; start the control loop, the producer and three consumer
//! pods; scale up to five; roll a deploy (surge one new pod, then delete an
//! old one gracefully, pod by pod); split a shard; stop the producer, wait
//! until every record was processed, and run the checker. Every wait is on
//! a condition with a deadline; the pauses between steps only let traffic
//! flow so the tables have something to show.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use shardring_consumer::check::{self, ProcessedRecord, ProducedRecord};
use shardring_consumer::clients;
use tokio_util::sync::CancellationToken;

use super::cluster::{Cluster, GroupTiming, NAMESPACE};
use super::consumers::{self, ConsumerSettings};
use super::controller::{self, Shared};
use super::producer::Producer;
use super::report::Verdict;
use super::{DemoConfig, DemoError, LEASE_TABLE, REGION, SHARD_GROUP, STREAM};
use crate::crds::ShardPhase;
use crate::emulators::Emulator;
use crate::lease::LeaseReader;
use crate::source::kinesis::{KinesisShardSource, ReaderOptions, StreamId, TopologyReader};

/// How often the control loop reconciles.
const TICK: Duration = Duration::from_millis(200);
/// How often the story looks at a condition.
const POLL: Duration = Duration::from_millis(100);
/// The longest any one step may take before the demo gives up.
const STEP_DEADLINE: Duration = Duration::from_secs(90);
/// Records per PutRecords call, and calls per second.
const BATCH: usize = 10;
const BATCH_INTERVAL: Duration = Duration::from_millis(100);

/// Stops the control loop and kills every consumer when dropped, so an
/// error or Ctrl-C anywhere in the story leaves nothing running.
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

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

struct Story {
    config: DemoConfig,
    started: Instant,
    shared: Arc<Mutex<Shared>>,
    settings: ConsumerSettings,
    grace: Duration,
}

impl Story {
    /// Creates pod `name` and starts its consumer.
    fn start_pod(&self, name: &str) -> Result<(), DemoError> {
        let mut state = lock(&self.shared);
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
    fn delete_pod(&self, name: &str) {
        let mut state = lock(&self.shared);
        if state.cluster.delete_pod(name, self.grace, Timestamp::now()) {
            println!(
                "  - pod {name} deleted (grace period {} s): its consumer got SIGTERM and drains until revoked",
                self.grace.as_secs()
            );
        }
    }

    fn phase(&self, phase: &'static str, title: &str) {
        lock(&self.shared).phase = phase;
        println!(
            "\n== [{:>5.1} s] {title}",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Waits until `condition` holds (checked every [`POLL`]), failing
    /// after [`STEP_DEADLINE`] or as soon as a consumer died unasked.
    async fn wait_for(
        &self,
        what: &str,
        condition: impl Fn(&Shared) -> bool,
    ) -> Result<(), DemoError> {
        let started = Instant::now();
        loop {
            {
                let state = lock(&self.shared);
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

    /// Lets traffic flow for a while (not a correctness wait).
    async fn pause(&self, base: Duration) {
        tokio::time::sleep(self.config.scaled(base, Duration::from_millis(300))).await;
    }
}

/// Whether every live pod that holds active shards has processed a record.
fn every_owner_reading(state: &Shared) -> bool {
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

fn readable_shards(state: &Shared) -> usize {
    state.cluster.published.as_ref().map_or(0, |doc| {
        doc.shards
            .values()
            .filter(|r| r.state == ShardPhase::Active || r.state == ShardPhase::Revoking)
            .count()
    })
}

/// Runs the whole story with its files under `dir` and returns the verdict.
pub async fn run(config: &DemoConfig, dir: &Path) -> Result<Verdict, DemoError> {
    let explicit = config.consumer_binary.clone();
    let binary = tokio::task::spawn_blocking(move || consumers::locate(explicit.as_deref()))
        .await
        .map_err(|e| DemoError::Consumer(e.to_string()))??;
    // The clock starts once the consumer binary is there (a first build
    // is not the demo).
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
    create_stream(&kinesis, config.shards).await?;
    shardring_consumer::lease::create_table(&dynamodb, LEASE_TABLE, Duration::from_secs(30))
        .await
        .map_err(|e| DemoError::Aws(e.to_string()))?;
    println!(
        "stream {STREAM} ({} shards) on {kinesis_url}, lease table {LEASE_TABLE} on {dynamo_url}",
        config.shards
    );

    // The operator's own source and lease reader, as `shardring run` builds them.
    let reader = TopologyReader::new(
        crate::source::kinesis::kinesis_client(&sdk, Some(REGION), Some(&kinesis_url)),
        StreamId::named(STREAM),
        ReaderOptions {
            min_refresh_interval: Duration::from_millis(300),
            ..ReaderOptions::default()
        },
        None,
    );
    let leases = LeaseReader::new(
        crate::lease::dynamodb_client(&sdk, Some(REGION), Some(&dynamo_url)),
        LEASE_TABLE,
        Some(STREAM.to_owned()),
        None,
    );
    let source = Arc::new(KinesisShardSource::new(
        Arc::new(reader),
        Some(Arc::new(leases)),
    ));

    let timing = GroupTiming {
        drain_timeout: config.scaled(Duration::from_secs(10), Duration::from_secs(2)),
        lease_failover: config.scaled(Duration::from_secs(4), Duration::from_secs(1)),
        rebalance_delay: config.scaled(Duration::from_secs(3), Duration::from_millis(500)),
    };
    let drain_deadline = config.scaled(Duration::from_secs(10), Duration::from_secs(2));
    let cluster = Cluster::new(SHARD_GROUP, STREAM, LEASE_TABLE, timing, dir);
    let shared = Arc::new(Mutex::new(Shared::new(
        cluster,
        controller::describe(&source),
    )));
    let stop = CancellationToken::new();
    let _cleanup = Cleanup {
        shared: shared.clone(),
        stop: stop.clone(),
    };
    let control = tokio::spawn(controller::run(
        shared.clone(),
        source.clone(),
        TICK,
        stop.clone(),
    ));
    let story = Story {
        config: config.clone(),
        started,
        shared: shared.clone(),
        settings: ConsumerSettings {
            binary,
            stream: STREAM.to_owned(),
            lease_table: LEASE_TABLE.to_owned(),
            shard_group: format!("{NAMESPACE}/{SHARD_GROUP}"),
            kinesis_endpoint: kinesis_url.clone(),
            dynamodb_endpoint: dynamo_url.clone(),
            failover: timing.lease_failover,
            drain_deadline,
        },
        grace: drain_deadline + Duration::from_secs(5),
    };
    let producer = Producer::start(kinesis.clone(), STREAM.to_owned(), BATCH, BATCH_INTERVAL);
    println!(
        "producer: {} records/s over {} partition keys",
        BATCH as u64 * 1000 / BATCH_INTERVAL.as_millis() as u64,
        super::producer::PARTITION_KEYS
    );

    let initial = config.consumers.max(1);
    story.phase(
        "start",
        &format!(
            "1. start: {initial} consumer pods read {} shards",
            config.shards
        ),
    );
    for i in 0..initial {
        story.start_pod(&format!("orders-v1-{i}"))?;
    }
    story
        .wait_for("every shard active, leased by its owner, and read", |s| {
            s.settled() && every_owner_reading(s)
        })
        .await?;
    story.pause(Duration::from_secs(3)).await;

    let scaled = initial + 2;
    story.phase(
        "scale up",
        &format!(
            "2. scale up to {scaled} pods (optional moves wait for rebalance.delay = {} ms)",
            timing.rebalance_delay.as_millis()
        ),
    );
    for i in initial..scaled {
        story.start_pod(&format!("orders-v1-{i}"))?;
    }
    story
        .wait_for("the scale-up to be balanced and settled", |s| {
            s.settled() && s.load_spread() <= 1 && every_owner_reading(s)
        })
        .await?;
    story.pause(Duration::from_secs(3)).await;

    story.phase(
        "rolling deploy",
        "3. rolling deploy: surge one new pod, then delete one old pod gracefully, pod by pod",
    );
    let rolling_shards = readable_shards(&lock(&shared));
    for i in 0..scaled {
        let old = format!("orders-v1-{i}");
        story.start_pod(&format!("orders-v2-{i}"))?;
        story.delete_pod(&old);
        story
            .wait_for(&format!("{old} to hand its shards over and exit"), |s| {
                !s.cluster.pods.contains_key(&old) && s.settled()
            })
            .await?;
    }
    story
        .wait_for("the new pods to be balanced and settled", |s| {
            s.settled() && s.load_spread() <= 1 && every_owner_reading(s)
        })
        .await?;
    story.pause(Duration::from_secs(2)).await;

    story.phase(
        "split",
        "4. SplitShard: the children wait until the parent is read to its end",
    );
    let (parent, middle) = widest_open_shard(&lock(&shared))?;
    split(&kinesis, &parent, middle).await?;
    story
        .wait_for("the split's children to be active and read", |s| {
            children_active(s, &parent) && s.settled() && every_owner_reading(s)
        })
        .await?;
    story.pause(Duration::from_secs(3)).await;

    story.phase(
        "drain",
        "5. stop the producer; wait until every record is processed",
    );
    let (produced, failures) = producer.stop().await;
    if failures > 0 {
        println!("  producer: {failures} PutRecords calls or entries failed (not expected back)");
    }
    let logs = lock(&shared).cluster.record_logs.clone();
    wait_all_processed(&logs, &produced).await?;
    stop.cancel();
    let _ = control.await;
    let (parents, handoffs_by_phase, problems) = {
        let mut state = lock(&shared);
        state.cluster.kill_all();
        let parents: BTreeMap<String, Vec<String>> = state
            .topology
            .as_ref()
            .map(|t| {
                t.shards
                    .iter()
                    .filter(|s| !s.parents.is_empty())
                    .map(|s| (s.id.clone(), s.parents.clone()))
                    .collect()
            })
            .unwrap_or_default();
        (parents, state.handoffs_by_phase(), state.problems.clone())
    };
    println!(
        "  consumers stopped; running the checker over {} record logs",
        logs.len()
    );
    let processed = read_logs(&logs)?;
    let report = check::check(&processed, &produced, &parents);
    drop(kinesis_emulator);
    drop(dynamo_emulator);
    Ok(Verdict {
        check: report,
        handoffs_by_phase,
        rolling_shards,
        problems,
        elapsed: started.elapsed(),
    })
}

async fn create_stream(client: &aws_sdk_kinesis::Client, shards: u32) -> Result<(), DemoError> {
    let aws = |e: String| DemoError::Aws(e);
    client
        .create_stream()
        .stream_name(STREAM)
        .shard_count(shards as i32)
        .send()
        .await
        .map_err(|e| aws(aws_sdk_kinesis::error::DisplayErrorContext(&e).to_string()))?;
    wait_active(client).await
}

async fn wait_active(client: &aws_sdk_kinesis::Client) -> Result<(), DemoError> {
    let started = Instant::now();
    loop {
        let status = client
            .describe_stream_summary()
            .stream_name(STREAM)
            .send()
            .await
            .ok()
            .and_then(|o| {
                o.stream_description_summary()
                    .map(|s| s.stream_status().clone())
            });
        if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(DemoError::Timeout {
                what: format!("stream {STREAM} to be ACTIVE"),
                after: Duration::from_secs(30),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The open shard with the widest hash key range, and its middle key.
fn widest_open_shard(state: &Shared) -> Result<(String, u128), DemoError> {
    let range = |s: &crate::engine::Shard| {
        let r = s.hash_key_range.as_ref()?;
        Some((r.start.parse::<u128>().ok()?, r.end.parse::<u128>().ok()?))
    };
    let (parent, (start, end)) = state
        .topology
        .as_ref()
        .into_iter()
        .flat_map(|t| t.shards.iter())
        .filter(|s| s.state == crate::engine::ShardState::Open)
        .filter_map(|s| Some((s.id.clone(), range(s)?)))
        .max_by_key(|(_, (start, end))| end - start)
        .ok_or_else(|| DemoError::Aws("no open shard with a hash key range to split".into()))?;
    Ok((parent, start + (end - start) / 2 + 1))
}

/// Splits `parent` at `middle` and waits for the stream to be ACTIVE again.
async fn split(
    client: &aws_sdk_kinesis::Client,
    parent: &str,
    middle: u128,
) -> Result<(), DemoError> {
    client
        .split_shard()
        .stream_name(STREAM)
        .shard_to_split(parent)
        .new_starting_hash_key(middle.to_string())
        .send()
        .await
        .map_err(|e| DemoError::Aws(aws_sdk_kinesis::error::DisplayErrorContext(&e).to_string()))?;
    println!(
        "  SplitShard {} at hash key {middle}",
        super::report::short(parent)
    );
    wait_active(client).await
}

/// Whether `parent` is complete and its two children are active.
fn children_active(state: &Shared, parent: &str) -> bool {
    let Some(doc) = &state.cluster.published else {
        return false;
    };
    let parent_done = doc
        .shards
        .get(parent)
        .is_some_and(|r| r.state == ShardPhase::Complete);
    let children: Vec<_> = doc
        .shards
        .values()
        .filter(|r| r.parents.iter().any(|p| p == parent))
        .collect();
    parent_done && children.len() == 2 && children.iter().all(|r| r.state == ShardPhase::Active)
}

fn read_logs(logs: &[PathBuf]) -> Result<Vec<ProcessedRecord>, DemoError> {
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
