//! RabbitMQ partition queues end to end, on a real control plane and a real
//! broker (Debian's rabbitmq-server, started by the test on ports of its
//! own; see `shardring_e2e::queues`): a ShardGroup whose source is the
//! queues of a vhost matching a pattern, the operator (either mode, as its
//! ServiceAccount under the install's RBAC, which lets it `get` the
//! credentials Secret and nothing more) with its consumer endpoint, and
//! reference consumers in their RabbitMQ mode acknowledging every release.
//! The story: three pods, a scale-up to four, a rolling deploy of all four,
//! a queue created (assigned at the next listing; the time to its first
//! handled message is printed) and one deleted (dropped from the
//! document), the broker restarted (a Degraded condition and a Warning
//! Event with reason `BrokerUnreachable`, and the published document never
//! loses a queue meanwhile), a consumer killed with SIGKILL. Then the
//! checker's verdict over every message: nothing lost, no two holds of a
//! queue at once, order per queue within holds and across owners,
//! duplicates only of messages whose acknowledgement was in flight when a
//! hold was lost (counted and printed), and the clean handoffs' gaps.
//! Without a cluster, or without rabbitmq-server, it prints `SKIPPED` and
//! passes (with `SHARDRING_REQUIRE_TOOLS=1` a missing broker fails).

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use kube::{Api, Client};
use shardring_crds::ShardGroup;
use shardring_devkit::broker::Broker;
use shardring_devkit::wait::wait_for_every;
use shardring_e2e::account;
use shardring_e2e::cluster::{Cluster, cluster_or_skip};
use shardring_e2e::harness::{HarnessError, NAME, STEP_TIMEOUT, files_dir};
use shardring_e2e::kit::KitTurn;
use shardring_e2e::operator::OperatorMode;
use shardring_e2e::queues::{QueueHarness, verdict};
use shardring_e2e::{Probe, wait_for};

type StoryResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partition_queues_on_a_real_broker() {
    let _turn = crate::TURNS.read().await;
    let _kit_turn = KitTurn::shared().await;
    let Some(client) = cluster_or_skip("rabbitmq").await else {
        return;
    };
    let Some(broker) = Broker::start_or_skip("e2e rabbitmq").await else {
        return;
    };
    let mode = OperatorMode::from_env().unwrap_or_else(|e| panic!("{e}"));
    let cluster = Cluster::from_environment(client.clone());
    let tag = format!("sr-e2e-rabbitmq-{}", std::process::id());
    let operator_cluster = account::operator_cluster(&cluster, &client, &tag, None)
        .await
        .unwrap_or_else(|e| panic!("e2e[rabbitmq]: the operator's identity: {e}"));
    let mut harness =
        match QueueHarness::start(&cluster, &operator_cluster, mode, broker, "rabbitmq", 6).await {
            Ok(harness) => harness,
            Err(error) => panic!("e2e[rabbitmq] could not start: {error}"),
        };
    let result = story(&mut harness).await;
    let namespace = harness.namespace.clone();
    let cleanup = harness.cleanup().await;
    if let Err(error) = result {
        panic!("e2e[rabbitmq] failed in namespace {namespace}: {error}");
    }
    if let Err(error) = cleanup {
        panic!("e2e[rabbitmq] cleanup of namespace {namespace} failed: {error}");
    }
    // The consumers' logs stay for a story that failed, not after a pass.
    let _ = std::fs::remove_dir_all(files_dir(&namespace));
}

/// Prints a step with the story's clock, straight to stderr (a CI log
/// shows it for a passing test too).
fn step(started: Instant, what: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "e2e[rabbitmq]: [{:>5.1} s] {what}",
        started.elapsed().as_secs_f64()
    );
}

async fn story(h: &mut QueueHarness) -> StoryResult {
    let started = Instant::now();
    h.start_producer();
    step(started, "3 pods read 6 queues");
    h.add_pods(&["q-v1-0", "q-v1-1", "q-v1-2"]).await?;
    h.wait_settled("3 pods").await?;

    step(started, "scale up 3 -> 4");
    h.add_pods(&["q-v1-3"]).await?;
    h.wait_settled("the scale-up").await?;

    step(started, "rolling deploy of the 4 pods");
    for i in 0..4 {
        h.add_pods(&[&format!("q-v2-{i}")]).await?;
        h.pods.delete_gracefully(&format!("q-v1-{i}")).await?;
    }
    h.wait_settled("the rolling deploy").await?;

    step(started, "a queue created: orders.6");
    let created = Timestamp::now();
    h.create_queue("orders.6").await?;
    let assigned = wait_owned(h, "orders.6").await?;
    let first = wait_handled(h, "orders.6").await?;
    let after = |at: Timestamp| at.duration_since(created).as_millis();
    step(
        started,
        &format!(
            "orders.6 active on a pod in the document {} ms, and its first message handled {} ms, \
             after its creation (refresh 1 s)",
            after(assigned),
            after(first)
        ),
    );
    h.wait_settled("the new queue").await?;

    step(started, "a queue deleted: orders.0 (drained first)");
    h.drain_and_delete_queue("orders.0").await?;
    wait_dropped(h, "orders.0").await?;
    h.wait_settled("the deleted queue").await?;

    step(started, "the broker restarted");
    let sampler = Sampler::start(h.client.clone(), h.namespace.clone());
    let stopped = h
        .broker
        .stop()
        .await
        .map_err(|e| HarnessError::Broker(e.to_string()))?;
    let degraded = wait_degraded(&h.client, &h.namespace).await?;
    let restarted = h
        .broker
        .start_again()
        .await
        .map_err(|e| HarnessError::Broker(e.to_string()))?;
    h.wait_settled("after the broker restart").await?;
    let samples = sampler.stop().await;
    step(
        started,
        &format!(
            "broker stopped in {} ms, Degraded {degraded} while it was down, started again in {} ms; \
             {} documents sampled meanwhile",
            stopped.as_millis(),
            restarted.as_millis(),
            samples.len()
        ),
    );
    let queues: BTreeSet<String> = h.queues().into_iter().collect();
    check_never_shrank(&samples, &queues)?;

    step(
        started,
        "a consumer killed (SIGKILL, pod force-deleted): q-v2-1",
    );
    h.pods.kill_and_force_delete("q-v2-1").await?;
    h.wait_settled("after the kill").await?;

    step(started, "the checker's verdict");
    let verdict = verdict::finish(h, "rabbitmq").await?;
    if verdict.records.overlaps.len() + verdict.unexplained_duplicates.len() > 0 {
        return Err("overlaps or unexplained duplicates".into());
    }
    step(started, "done");
    Ok(())
}

/// Waits until `queue` is active on a pod in the document, looking every
/// 20 ms; when it was seen.
async fn wait_owned(h: &QueueHarness, queue: &str) -> Result<Timestamp, HarnessError> {
    let what = format!("{queue} active on a pod");
    wait_for_every(Duration::from_millis(20), &what, STEP_TIMEOUT, || async {
        let owner = h
            .document()
            .await?
            .and_then(|doc| doc.shards.get(queue).and_then(|r| r.owner.clone()));
        Ok::<_, HarnessError>(match owner {
            Some(_) => Probe::Done(Timestamp::now()),
            None => Probe::Pending("not owned".into()),
        })
    })
    .await
    .map_err(Into::into)
}

/// Waits until a consumer handled a message of `queue`; when it did, as
/// its log says.
async fn wait_handled(h: &QueueHarness, queue: &str) -> Result<Timestamp, HarnessError> {
    wait_for(
        &format!("a message of {queue} handled"),
        STEP_TIMEOUT,
        || async {
            let (records, _) = verdict::read_logs(h.pods.logs())?;
            let first = records
                .iter()
                .filter(|r| r.shard == queue)
                .map(|r| r.time)
                .min();
            Ok::<_, HarnessError>(match first {
                Some(at) => Probe::Done(at),
                None => Probe::Pending("none yet".into()),
            })
        },
    )
    .await
    .map_err(Into::into)
}

/// Waits until the document no longer lists `queue`.
async fn wait_dropped(h: &QueueHarness, queue: &str) -> Result<(), HarnessError> {
    wait_for(
        &format!("{queue} gone from the document"),
        STEP_TIMEOUT,
        || async {
            let listed = h
                .document()
                .await?
                .is_some_and(|doc| doc.shards.contains_key(queue));
            Ok::<_, HarnessError>(if listed {
                Probe::Pending("still listed".into())
            } else {
                Probe::Done(())
            })
        },
    )
    .await
    .map_err(Into::into)
}

/// Waits until the group is Degraded with reason `BrokerUnreachable` and a
/// Warning Event says so; returns the condition's message.
async fn wait_degraded(client: &Client, namespace: &str) -> Result<String, HarnessError> {
    let groups = Api::<ShardGroup>::namespaced(client.clone(), namespace);
    let events = Api::<Event>::namespaced(client.clone(), namespace);
    wait_for(
        "Degraded BrokerUnreachable and its Event",
        STEP_TIMEOUT,
        || async {
            let group = groups.get(NAME).await?;
            let degraded = group
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| {
                    c.type_ == "Degraded" && c.status == "True" && c.reason == "BrokerUnreachable"
                })
                .map(|c| c.message.clone());
            let event = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .any(|e| {
                    e.reason.as_deref() == Some("BrokerUnreachable")
                        && e.type_.as_deref() == Some("Warning")
                });
            Ok::<_, HarnessError>(match (degraded, event) {
                (Some(message), true) => Probe::Done(message),
                (degraded, event) => {
                    Probe::Pending(format!("condition {degraded:?}, event {event}"))
                }
            })
        },
    )
    .await
    .map_err(Into::into)
}

/// One sampled document: its epoch and the queues it lists.
type Sample = (u64, BTreeSet<String>);

/// The published document sampled every 100 ms.
struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(client: Client, namespace: String) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&samples);
        let task = tokio::spawn(async move {
            let maps = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, &namespace);
            loop {
                if let Ok(Some(map)) = maps.get_opt(shardring_e2e::harness::CONFIG_MAP).await
                    && let Ok(doc) = shardring_e2e::assignment_document(&map)
                {
                    into.lock()
                        .push((doc.epoch, doc.shards.keys().cloned().collect()));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self { samples, task }
    }

    async fn stop(self) -> Vec<Sample> {
        self.task.abort();
        let _ = self.task.await;
        self.samples.lock().clone()
    }
}

/// Fails unless every sampled document lists every queue and the epochs
/// never go back.
fn check_never_shrank(
    samples: &[(u64, BTreeSet<String>)],
    queues: &BTreeSet<String>,
) -> StoryResult {
    if samples.is_empty() {
        return Err("no document sampled during the broker restart".into());
    }
    for pair in samples.windows(2) {
        if pair[1].0 < pair[0].0 {
            return Err(format!(
                "the document went back from epoch {} to {}",
                pair[0].0, pair[1].0
            )
            .into());
        }
    }
    for (epoch, listed) in samples {
        let missing: Vec<&String> = queues.difference(listed).collect();
        if !missing.is_empty() {
            return Err(format!("epoch {epoch} lost {missing:?} while the broker was away").into());
        }
    }
    Ok(())
}
