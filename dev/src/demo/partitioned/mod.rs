//! The demo's static act: a ShardGroup with a static source of partitions
//! and no lease table, as a partitioned queue (SQS, RabbitMQ, …) would have,
//! consumed through the operator's consumer endpoint. The endpoint runs in
//! this process without an API server ([`EndpointServer::bind_local`], a
//! token minted per pod by [`LocalTokens`], the peer-IP check on); the
//! control loop runs the core's cycle over the in-process cluster and,
//! through the operator's `endpoint_sync`, publishes the pods' views and
//! takes their release acknowledgements as handoff evidence. The pods are
//! tasks running the consumer crate's endpoint client and static-partition
//! worker over HTTPS on loopback ([`pods`]) against an in-memory queue with
//! a producer ([`queue`]). Scale up, then a rolling deploy; at the end the
//! [`ledger`] shows each partition processed exactly once and in order
//! across owners, no overlap, and the handoff gaps against the drain
//! timeout.

pub mod hot;
pub mod ledger;
pub(in crate::demo) mod pods;
pub mod queue;

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use jiff::Timestamp;
use prometheus_client::registry::Registry;
use shardring_core::topology::Topology;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::cluster::{Cluster, GroupTiming, NAMESPACE, PodProcess};
use super::controller::{CycleEndpoint, Shared};
use super::report::MoveKind;
use super::stage::wait_on;
use super::{DemoConfig, DemoError};
use ledger::{Ledger, PartitionFigures};
use queue::{Producer, Queue};
use shardring::GroupKey;
use shardring::endpoint::{
    EndpointMetrics, EndpointServer, EndpointServerConfig, EndpointState, LocalTokens, Requested,
};
use shardring_crds::ShardPhase;
use shardring_crds::shard_group::StaticSource;

/// The act's ShardGroup.
const GROUP: &str = "queues";
/// Its partitions' names.
const TEMPLATE: &str = "q-{index}";
/// Partitions of the group.
pub const PARTITIONS: u32 = 24;
/// How often the control loop reconciles when nothing asks sooner.
const TICK: Duration = Duration::from_millis(200);

/// What distinguishes an act over static partitions: its group, its
/// partitions and their message sizes, and whether its consumers report
/// their load (and the group balances by it).
#[derive(Debug, Clone)]
pub(super) struct ActSpec {
    group: &'static str,
    template: &'static str,
    partitions: u32,
    /// Bytes per message of each partition (`None`: the queue's default).
    sizes: Option<Vec<u64>>,
    /// How often consumers report their load (`None`: they do not).
    load_report: Option<Duration>,
    /// Group settings beyond the common ones.
    configure: fn(&mut shardring_crds::ShardGroup, &DemoConfig),
}

impl ActSpec {
    /// The static act.
    fn partitions() -> Self {
        Self {
            group: GROUP,
            template: TEMPLATE,
            partitions: PARTITIONS,
            sizes: None,
            load_report: None,
            configure: |_, _| {},
        }
    }
}

/// The act's settings at `config`'s pace.
fn timing(config: &DemoConfig) -> GroupTiming {
    GroupTiming {
        drain_timeout: config.scaled(Duration::from_secs(10), Duration::from_secs(2)),
        lease_failover: config.scaled(Duration::from_secs(4), Duration::from_secs(1)),
        rebalance_delay: config.scaled(Duration::from_secs(1), Duration::from_millis(300)),
    }
}

/// Runs the act with its files under `dir`; `started` is the demo's clock.
pub async fn run(
    config: &DemoConfig,
    dir: &Path,
    started: Instant,
) -> Result<PartitionFigures, DemoError> {
    let act = Act::start(config, &dir.join("static"), started, ActSpec::partitions()).await?;
    let result = act.story(config).await;
    let figures = act.finish().await;
    result.map(|()| figures)
}

/// Everything the act runs; dropping it stops all of it.
pub(super) struct Act {
    spec: ActSpec,
    started: Instant,
    act_started: Instant,
    dir: PathBuf,
    shared: Arc<Mutex<Shared>>,
    topology: Topology,
    tokens: Arc<LocalTokens>,
    url: String,
    ca_file: PathBuf,
    queue: Arc<Queue>,
    ledger: Arc<Ledger>,
    producer: Option<Producer>,
    grace: Duration,
    drain_timeout: Duration,
    /// Whether the story ran its rolling deploy (its moves are reported).
    rolled: AtomicBool,
    drain_deadline: Duration,
    work: Duration,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Act {
    fn drop(&mut self) {
        self.stop.cancel();
        self.shared.lock().cluster.kill_all();
    }
}

impl Act {
    async fn start(
        config: &DemoConfig,
        dir: &Path,
        started: Instant,
        act: ActSpec,
    ) -> Result<Self, DemoError> {
        std::fs::create_dir_all(dir)?;
        let timing = timing(config);
        let spec = StaticSource {
            count: act.partitions,
            name_template: act.template.to_owned(),
        };
        let topology = Topology::of_partitions(spec.partition_names());
        let stop = CancellationToken::new();
        let (endpoint, server) = LocalEndpoint::start(dir, &stop).await?;
        let LocalEndpoint {
            state,
            tokens,
            url,
            ca_file,
        } = endpoint;
        let mut tasks = vec![server];

        let mut cluster = Cluster::new_static(act.group, act.partitions, act.template, timing, dir);
        (act.configure)(&mut cluster.group, config);
        let mut shared = Shared::new(cluster, format!("static:{}", act.partitions));
        // Serve the group's views from the first cycle on (a first request
        // would ask for that too).
        state.directory.want(&GroupKey::new(NAMESPACE, act.group));
        let requests = state.requests.listen().boxed();
        shared.endpoint = Some(CycleEndpoint::new(state));
        shared.phase = "static start";
        let shared = Arc::new(Mutex::new(shared));
        let (looping, fixed) = (shared.clone(), topology.clone());
        tasks.push(tokio::spawn(control_loop(
            requests,
            stop.clone(),
            move || {
                looping.lock().reconcile_fixed(&fixed, Timestamp::now());
                std::future::ready(())
            },
        )));
        let names = topology.shards.iter().map(|s| s.id.clone());
        let queue = Arc::new(match &act.sizes {
            Some(sizes) => Queue::with_sizes(names.zip(sizes.iter().copied())),
            None => Queue::new(names),
        });
        let producer = Producer::start(queue.clone(), Duration::from_millis(20));
        if act.load_report.is_none() {
            println!(
                "\nstatic act: ShardGroup {GROUP} with a static source of {PARTITIONS} partitions and \
                 no lease table; consumer endpoint on {url} (self-signed CA in memory, tokens minted \
                 per pod, peer-IP check on); producer: 50 messages/s per partition"
            );
        }
        let drain_deadline = config.scaled(Duration::from_secs(10), Duration::from_secs(2));
        Ok(Self {
            spec: act,
            started,
            act_started: Instant::now(),
            dir: dir.to_path_buf(),
            shared,
            topology,
            tokens,
            url,
            ca_file,
            queue,
            ledger: Arc::new(Ledger::default()),
            producer: Some(producer),
            grace: drain_deadline + Duration::from_secs(5),
            drain_timeout: timing.drain_timeout,
            rolled: AtomicBool::new(false),
            drain_deadline,
            work: Duration::from_millis(5),
            stop,
            tasks,
        })
    }

    fn phase(&self, phase: &'static str, title: &str) {
        announce(&self.shared, self.started, phase, title);
    }

    async fn story(&self, config: &DemoConfig) -> Result<(), DemoError> {
        let initial = config.consumers.max(1);
        self.phase(
            "static start",
            &format!("6. static act: {initial} consumer pods read {PARTITIONS} partitions through the endpoint"),
        );
        let names: Vec<String> = (0..initial).map(|i| format!("queues-v1-{i}")).collect();
        self.start_pods(&names)?;
        self.wait_settled("every partition active and read by its owner")
            .await?;
        pause(config).await;

        let scaled = initial + 2;
        self.phase(
            "static scale up",
            &format!("7. static act: scale up to {scaled} pods; moved partitions are released with an acknowledgement and their checkpoint"),
        );
        let names: Vec<String> = (initial..scaled)
            .map(|i| format!("queues-v1-{i}"))
            .collect();
        self.start_pods(&names)?;
        self.wait_settled("the scale-up to be balanced and settled")
            .await?;
        pause(config).await;

        self.phase(
            "static rolling deploy",
            "8. static act: rolling deploy, surge one new pod, then delete one old pod gracefully, pod by pod",
        );
        self.rolled.store(true, Ordering::Relaxed);
        for i in 0..scaled {
            let old = format!("queues-v1-{i}");
            self.start_pods(&[format!("queues-v2-{i}")])?;
            self.delete_pod(&old);
            wait_on(
                &self.shared,
                &format!("{old} to hand its partitions over and exit"),
                |s| !s.cluster.pods.contains_key(&old) && s.settled(),
            )
            .await?;
        }
        self.wait_settled("the new pods to be balanced and settled")
            .await?;
        pause(config).await;
        Ok(())
    }

    /// Creates the pods `names`, each with a token of its own, serves their
    /// views (one reconcile), then starts their consumers.
    fn start_pods(&self, names: &[String]) -> Result<(), DemoError> {
        let mut state = self.shared.lock();
        let mut gates = Vec::new();
        for name in names {
            gates.push(self.create_pod(&mut state, name)?);
        }
        // A reconcile now serves the pods' views before their first request.
        state.reconcile_fixed(&self.topology, Timestamp::now());
        for go in gates {
            let _ = go.send(());
        }
        Ok(())
    }

    /// Creates pod `name` and its consumer task, which waits for the
    /// returned gate.
    fn create_pod(&self, state: &mut Shared, name: &str) -> Result<oneshot::Sender<()>, DemoError> {
        let dir = state.cluster.pod_dir(name);
        std::fs::create_dir_all(&dir)?;
        let uid = state.cluster.next_uid();
        let token_file = dir.join("token");
        std::fs::write(&token_file, self.tokens.mint(NAMESPACE, name, &uid))?;
        let (go, start) = oneshot::channel();
        let shutdown = CancellationToken::new();
        let setup = pods::PodSetup {
            name: name.to_owned(),
            namespace: NAMESPACE.to_owned(),
            group: self.spec.group.to_owned(),
            url: self.url.clone(),
            token_file,
            ca_file: self.ca_file.clone(),
            queue: self.queue.clone(),
            ledger: self.ledger.clone(),
            drain_deadline: self.drain_deadline,
            work: self.work,
            load_report: self.spec.load_report,
        };
        let handle = tokio::spawn(pods::run(setup, start, shutdown.clone()));
        state.cluster.add_pod_as(
            name,
            uid,
            dir.join("annotations"),
            dir.join("records.jsonl"),
            PodProcess::Task { shutdown, handle },
            Timestamp::now(),
        );
        println!(
            "  + pod {name} created and Ready (consumer task, token in {})",
            self.relative(&dir.join("token"))
        );
        Ok(go)
    }

    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    fn delete_pod(&self, name: &str) {
        let deleted = self
            .shared
            .lock()
            .cluster
            .delete_pod(name, self.grace, Timestamp::now());
        if deleted {
            println!(
                "  - pod {name} deleted (grace period {} s): its consumer stops taking partitions and drains until revoked",
                self.grace.as_secs()
            );
        }
    }

    async fn wait_settled(&self, what: &str) -> Result<(), DemoError> {
        let ledger = self.ledger.clone();
        wait_on(&self.shared, what, |s| {
            s.settled() && s.load_spread() <= 1 && owners_reading(s, &ledger)
        })
        .await
    }

    /// Stops the producer, waits until every message was processed, stops
    /// everything and tallies the ledger.
    async fn finish(mut self) -> PartitionFigures {
        if let Some(producer) = self.producer.take() {
            producer.stop().await;
        }
        let produced = self.queue.produced();
        let deadline = Instant::now() + super::stage::STEP_DEADLINE;
        while !self.ledger.caught_up(&produced) && Instant::now() < deadline {
            if !self.shared.lock().problems.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.stop.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        let (evidence, rolling, problems) = {
            let mut state = self.shared.lock();
            state.cluster.kill_all();
            (
                evidence(&state),
                self.rolled.load(Ordering::Relaxed).then(|| {
                    (
                        state
                            .handoffs_by_phase()
                            .get("static rolling deploy")
                            .copied()
                            .unwrap_or(0),
                        self.spec.partitions as usize,
                    )
                }),
                state.problems.clone(),
            )
        };
        PartitionFigures {
            tally: self.ledger.figures(&produced),
            drain_timeout: self.drain_timeout,
            evidence,
            rolling,
            problems,
            elapsed: self.act_started.elapsed(),
        }
    }
}

/// The operator's consumer endpoint in this process, without an API server:
/// a token minted per pod, the self-signed CA in memory, the peer-IP check
/// on (every pod connects from 127.0.0.1).
pub(in crate::demo) struct LocalEndpoint {
    /// What the control loop feeds and the endpoint serves.
    pub(in crate::demo) state: EndpointState,
    /// Mints each pod's token.
    pub(in crate::demo) tokens: Arc<LocalTokens>,
    /// `https://127.0.0.1:<port>`.
    pub(in crate::demo) url: String,
    /// The CA consumers trust, written under the act's directory.
    pub(in crate::demo) ca_file: PathBuf,
}

impl LocalEndpoint {
    /// Starts the endpoint with its files under `dir`; it serves until
    /// `stop` (the returned task).
    pub(in crate::demo) async fn start(
        dir: &Path,
        stop: &CancellationToken,
    ) -> Result<(Self, JoinHandle<()>), DemoError> {
        let state = EndpointState::default();
        let tokens = Arc::new(LocalTokens::default());
        let mut endpoint = EndpointServerConfig::new(([127, 0, 0, 1], 0).into(), NAMESPACE);
        // No certificate mounted: the self-signed fallback, in memory.
        endpoint.tls_dir = dir.join("no-mounted-certificate");
        // Every pod connects from 127.0.0.1: the per-IP limit would count
        // them all as one.
        endpoint.ip_limit = 100_000;
        let metrics = EndpointMetrics::register(&mut Registry::default());
        let server = EndpointServer::bind_local(endpoint, tokens.clone(), state.clone(), metrics)
            .await
            .map_err(|e| DemoError::Consumer(format!("consumer endpoint: {e}")))?;
        let url = format!("https://{}", server.local_addr());
        let ca = state.ca.borrow().clone().ok_or_else(|| {
            DemoError::Consumer("the endpoint published no CA certificate".into())
        })?;
        let ca_file = dir.join("endpoint-ca.crt");
        std::fs::write(&ca_file, ca.as_bytes())?;
        let task = tokio::spawn(server.serve(stop.clone()));
        Ok((
            Self {
                state,
                tokens,
                url,
                ca_file,
            },
            task,
        ))
    }
}

/// Enters story phase `phase` (the moves made from now on count for it)
/// and prints its title with the demo's clock (`started`).
pub(in crate::demo) fn announce(
    shared: &Mutex<Shared>,
    started: Instant,
    phase: &'static str,
    title: &str,
) {
    shared.lock().phase = phase;
    println!("\n== [{:>5.1} s] {title}", started.elapsed().as_secs_f64());
}

/// Lets traffic flow between steps (not a correctness wait).
async fn pause(config: &DemoConfig) {
    tokio::time::sleep(config.scaled(Duration::from_secs(1), Duration::from_millis(300))).await;
}

/// Whether every active partition's published owner reads it.
fn owners_reading(state: &Shared, ledger: &Ledger) -> bool {
    state.cluster.published.as_ref().is_some_and(|doc| {
        doc.shards.iter().all(|(id, record)| {
            record.state != ShardPhase::Active
                || record
                    .owner
                    .as_ref()
                    .is_some_and(|owner| ledger.is_reading(owner, id))
        })
    })
}

/// Completed handoffs by evidence.
fn evidence(state: &Shared) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for event in &state.moves {
        if let MoveKind::HandedOver { evidence, .. } = event.kind {
            *out.entry(evidence).or_insert(0) += 1;
        }
    }
    out
}

/// Runs `reconcile` every [`TICK`], and at once when the endpoint asks (a
/// release acknowledged, a group's views wanted), as the operator's
/// controller does, until `stop`.
pub(in crate::demo) async fn control_loop<F, Fut>(
    mut requests: BoxStream<'static, Requested>,
    stop: CancellationToken,
    mut reconcile: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            asked = requests.next() => if asked.is_none() {
                // The endpoint is gone: reconcile on the tick alone.
                requests = futures::stream::pending().boxed();
            },
            () = tokio::time::sleep(TICK) => {}
        }
        reconcile().await;
    }
}
