//! The demo's RabbitMQ act, when `rabbitmq-server` is installed (else it
//! says it skipped): a broker of the demo's own with a vhost of partition
//! queues, a ShardGroup whose source is `rabbitmq` (the queues matching
//! `orders\.[0-9]+`, listed every second through the management API by a
//! monitoring-only user, through the operator's real source and
//! providers), the core's cycle over the in-process cluster with the
//! consumer endpoint in this process, and pods that are tasks running the
//! consumer crate's queue worker on the broker, acknowledging every
//! release. Three pods, a scale-up, a queue created; then the queue
//! checker's verdict over every message.

use parking_lot::Mutex;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use shardring::GroupKey;
use shardring::controller::Sources;
use shardring::source::rabbitmq::{Credentials, FixedSecrets};
use shardring::source::{Providers, SourceSettings};
use shardring_consumer::check::ProcessedRecord;
use shardring_consumer::rabbitmq::log::HoldEnd;
use shardring_consumer::rabbitmq::verdict::{self, QueueVerdict};
use shardring_crds::ShardPhase;
use shardring_crds::shard_group::{RabbitMqSource, ShardSource};
use shardring_devkit::broker::{ADMIN_PASSWORD, ADMIN_USER, Broker};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::pods;
use super::producer::QueueProducer;
use super::{GROUP, PREFETCH};
use crate::demo::cluster::{Cluster, GroupTiming, NAMESPACE, PodProcess};
use crate::demo::controller::{CycleEndpoint, Shared};
use crate::demo::partitioned::{LocalEndpoint, announce, control_loop};
use crate::demo::stage::{STEP_DEADLINE, wait_on};
use crate::demo::{DemoConfig, DemoError};

/// Its vhost, and the pattern of its partition queues.
const VHOST: &str = "demo";
const PATTERN: &str = r"orders\.[0-9]+";
/// Queues at the start (the act creates one more).
const QUEUES: u32 = 6;
/// The management user the operator lists queues as, and its Secret.
const LISTING: (&str, &str) = ("shardring-listing", "listing-only");
const SECRET: &str = "shardring-rabbitmq";

/// What the RabbitMQ act showed.
#[derive(Debug, Clone)]
pub struct QueueFigures {
    /// The queue checker's verdict.
    pub verdict: QueueVerdict,
    /// From the created queue's creation to its first message handled.
    pub created_to_first: Duration,
    /// Wall time of the act.
    pub elapsed: Duration,
}

impl QueueFigures {
    /// Whether the checker passed.
    pub fn passed(&self) -> bool {
        self.verdict.passed()
    }

    /// The printed figures.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "rabbitmq act: {}", self.verdict.summary());
        let _ = write!(
            out,
            "  a queue created was consumed {} ms later (refresh 1 s); the act took {:.1} s",
            self.created_to_first.as_millis(),
            self.elapsed.as_secs_f64()
        );
        out
    }
}

/// Runs the act with its files under `dir`; `None` when rabbitmq-server
/// is not installed (said on the way).
pub async fn run(
    config: &DemoConfig,
    dir: &Path,
    started: Instant,
) -> Result<Option<QueueFigures>, DemoError> {
    if Broker::installed().is_none() {
        println!(
            "\nrabbitmq act: SKIPPED: rabbitmq-server is not installed (apt-get install rabbitmq-server)"
        );
        return Ok(None);
    }
    let act = Act::start(config, &dir.join("rabbitmq"), started).await?;
    let story = act.story(config).await;
    let figures = act.finish().await;
    match (story, figures) {
        (Ok(created_to_first), Ok(mut figures)) => {
            figures.created_to_first = created_to_first;
            Ok(Some(figures))
        }
        (Err(error), _) | (_, Err(error)) => Err(error),
    }
}

struct Act {
    started: Instant,
    act_started: Instant,
    broker: Broker,
    shared: Arc<Mutex<Shared>>,
    endpoint: LocalEndpoint,
    producer: Option<QueueProducer>,
    drain_deadline: Duration,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Act {
    fn drop(&mut self) {
        self.stop.cancel();
        self.shared.lock().cluster.kill_all();
    }
}

fn broker_error(error: shardring_devkit::broker::BrokerError) -> DemoError {
    DemoError::Consumer(format!("the demo's broker: {error}"))
}

impl Act {
    async fn start(config: &DemoConfig, dir: &Path, started: Instant) -> Result<Self, DemoError> {
        std::fs::create_dir_all(dir)?;
        let broker = Broker::start().await.map_err(broker_error)?;
        let admin = broker.admin();
        let queues: Vec<String> = (0..QUEUES).map(|i| format!("orders.{i}")).collect();
        let setup = async {
            admin.create_vhost(VHOST).await?;
            admin
                .create_user(LISTING.0, LISTING.1, "monitoring")
                .await?;
            admin
                .set_permissions(VHOST, LISTING.0, "^$", "^$", "^$")
                .await?;
            for queue in &queues {
                admin.declare_queue(VHOST, queue).await?;
            }
            Ok(())
        };
        setup.await.map_err(broker_error)?;
        let stop = CancellationToken::new();
        let (endpoint, server) = LocalEndpoint::start(dir, &stop).await?;
        let timing = GroupTiming {
            drain_timeout: config.scaled(Duration::from_secs(10), Duration::from_secs(2)),
            lease_failover: Duration::from_secs(1),
            rebalance_delay: config.scaled(Duration::from_secs(1), Duration::from_millis(300)),
        };
        let source = ShardSource::Rabbitmq(RabbitMqSource {
            management_url: broker.management_url(),
            vhost: VHOST.into(),
            queue_pattern: PATTERN.into(),
            credentials_secret: SECRET.into(),
            refresh_interval: "1s".into(),
        });
        let cluster = Cluster::with_source(GROUP, source.clone(), None, timing, dir);
        let mut shared = Shared::new(cluster, source.summary());
        endpoint
            .state
            .directory
            .want(&GroupKey::new(NAMESPACE, GROUP));
        let requests = endpoint.state.requests.listen().boxed();
        shared.endpoint = Some(CycleEndpoint::new(endpoint.state.clone()));
        let shared = Arc::new(Mutex::new(shared));
        // The operator's own sources, the Secret held in memory (the demo
        // has no API server).
        let secrets = FixedSecrets::default().with(
            SECRET,
            Credentials {
                username: LISTING.0.into(),
                password: LISTING.1.into(),
            },
        );
        let settings = SourceSettings::default().with_secrets(Arc::new(secrets));
        let sources = Sources::for_providers(Arc::new(Providers::new(settings, None)));
        // Each reconcile reads the group's source first (the operator's
        // `Sources`: the last good topology kept across failed reads).
        let looping = shared.clone();
        let sources = Arc::new(sources);
        let reconcile = move || {
            let (shared, sources) = (looping.clone(), sources.clone());
            async move {
                let group = shared.lock().cluster.group.clone();
                let now = Timestamp::now();
                let topology = sources.read(&group, now).await;
                shared.lock().reconcile_observed(topology, now);
            }
        };
        let tasks = vec![
            server,
            tokio::spawn(control_loop(requests, stop.clone(), reconcile)),
        ];
        let url = broker.amqp_url(ADMIN_USER, ADMIN_PASSWORD, VHOST);
        let producer = QueueProducer::start(url, queues, Duration::from_millis(40));
        println!(
            "\nrabbitmq act: broker {} on AMQP port {}; ShardGroup {GROUP} with a rabbitmq source (the \
             queues of vhost {VHOST} matching {PATTERN}, listed every second through {}); producer: 25 \
             messages/s per queue",
            broker.node(),
            broker.ports().amqp,
            broker.management_url()
        );
        Ok(Self {
            started,
            act_started: Instant::now(),
            broker,
            shared,
            endpoint,
            producer: Some(producer),
            drain_deadline: config.scaled(Duration::from_secs(10), Duration::from_secs(2)),
            stop,
            tasks,
        })
    }

    fn phase(&self, phase: &'static str, title: &str) {
        announce(&self.shared, self.started, phase, title);
    }

    /// The story; returns how long the created queue took to be consumed.
    async fn story(&self, config: &DemoConfig) -> Result<Duration, DemoError> {
        let initial = config.consumers.max(1);
        self.phase(
            "rabbitmq start",
            &format!(
                "9. rabbitmq act: {initial} pods consume {QUEUES} queues with the queue worker"
            ),
        );
        let names: Vec<String> = (0..initial).map(|i| format!("rabbitmq-{i}")).collect();
        self.start_pods(&names)?;
        self.wait_settled("every queue consumed by its owner")
            .await?;

        self.phase(
            "rabbitmq scale up",
            "10. rabbitmq act: scale up by one pod; each moved queue is released (channel closed, every ack in) and acknowledged",
        );
        self.start_pods(&[format!("rabbitmq-{initial}")])?;
        self.wait_settled("the scale-up to be balanced and settled")
            .await?;

        self.phase(
            "rabbitmq queue created",
            "11. rabbitmq act: a queue is created on the broker; the next listing assigns it",
        );
        let queue = format!("orders.{QUEUES}");
        let created = Timestamp::now();
        self.broker
            .admin()
            .declare_queue(VHOST, &queue)
            .await
            .map_err(broker_error)?;
        if let Some(producer) = &self.producer {
            producer.add_queue(&queue);
        }
        let first = self.wait_handled(&queue).await?;
        let after = Duration::try_from(first.duration_since(created)).unwrap_or_default();
        println!(
            "  {queue} consumed {} ms after its creation",
            after.as_millis()
        );
        self.wait_settled("the new queue to be balanced and settled")
            .await?;
        Ok(after)
    }

    /// Creates the pods `names` with a token each, serves their views (one
    /// reconcile), then starts their consumers.
    fn start_pods(&self, names: &[String]) -> Result<(), DemoError> {
        let amqp = self.broker.amqp_url(ADMIN_USER, ADMIN_PASSWORD, VHOST);
        let mut gates = Vec::new();
        {
            let mut state = self.shared.lock();
            for name in names {
                let dir = state.cluster.pod_dir(name);
                std::fs::create_dir_all(&dir)?;
                let uid = state.cluster.next_uid();
                let token_file = dir.join("token");
                std::fs::write(
                    &token_file,
                    self.endpoint.tokens.mint(NAMESPACE, name, &uid),
                )?;
                let (go, start) = oneshot::channel();
                let shutdown = CancellationToken::new();
                let pod = pods::QueuePod {
                    name: name.clone(),
                    endpoint_url: self.endpoint.url.clone(),
                    token_file,
                    ca_file: self.endpoint.ca_file.clone(),
                    amqp_url: amqp.clone(),
                    log: dir.join("records.jsonl"),
                    drain_deadline: self.drain_deadline,
                };
                let handle = tokio::spawn(pod.run(start, shutdown.clone()));
                state.cluster.add_pod_as(
                    name,
                    uid,
                    dir.join("annotations"),
                    dir.join("records.jsonl"),
                    PodProcess::Task { shutdown, handle },
                    Timestamp::now(),
                );
                gates.push(go);
                println!("  + pod {name} created and Ready (queue worker task)");
            }
        }
        for go in gates {
            let _ = go.send(());
        }
        Ok(())
    }

    async fn wait_settled(&self, what: &str) -> Result<(), DemoError> {
        wait_on(&self.shared, what, |s| {
            s.settled() && s.load_spread() <= 1 && owners_handled(s)
        })
        .await
    }

    /// Waits until some pod handled a message of `queue`; when it did.
    async fn wait_handled(&self, queue: &str) -> Result<Timestamp, DemoError> {
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            let (records, _) = self.logs()?;
            if let Some(first) = records
                .iter()
                .filter(|r| r.shard == queue)
                .map(|r| r.time)
                .min()
            {
                return Ok(first);
            }
            if Instant::now() >= deadline {
                return Err(DemoError::Timeout {
                    what: format!("a message of {queue} handled"),
                    after: STEP_DEADLINE,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn logs(&self) -> Result<(Vec<ProcessedRecord>, Vec<HoldEnd>), DemoError> {
        let paths = self.shared.lock().cluster.record_logs.clone();
        verdict::read_logs(&paths).map_err(|e| DemoError::Log {
            path: e.path,
            detail: e.detail,
        })
    }

    /// Stops the producer, waits until every confirmed message was handled,
    /// stops the pods (each releases its queues) and runs the checker.
    async fn finish(mut self) -> Result<QueueFigures, DemoError> {
        let produced = match self.producer.take() {
            Some(producer) => producer.stop().await.0,
            None => Vec::new(),
        };
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            let (records, ends) = self.logs()?;
            let verdict = verdict::check(&records, &ends, &produced, usize::from(PREFETCH));
            if verdict.records.lost.is_empty() || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The pods are deleted and stop as a deletion stops them: each
        // releases its queues and closes its broker connection. A pod task
        // aborted with its connection open leaves lapin's I/O thread to
        // panic when the runtime drops the task under it.
        self.shared
            .lock()
            .cluster
            .delete_all(STEP_DEADLINE, Timestamp::now());
        let deadline = Instant::now() + STEP_DEADLINE;
        while !self.shared.lock().cluster.all_exited() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.stop.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        self.shared.lock().cluster.kill_all();
        let (records, ends) = self.logs()?;
        let verdict = verdict::check(&records, &ends, &produced, usize::from(PREFETCH));
        Ok(QueueFigures {
            verdict,
            created_to_first: Duration::ZERO,
            elapsed: self.act_started.elapsed(),
        })
    }
}

/// Whether every pod that holds active queues has handled a message.
fn owners_handled(state: &Shared) -> bool {
    state.cluster.published.as_ref().is_some_and(|doc| {
        doc.shards
            .values()
            .filter(|record| record.state == ShardPhase::Active)
            .filter_map(|record| record.owner.as_ref())
            .all(|owner| {
                std::fs::metadata(state.cluster.pod_dir(owner).join("records.jsonl"))
                    .is_ok_and(|m| m.len() > 0)
            })
    })
}
