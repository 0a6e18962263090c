//! The scenario harness: one namespace per scenario on the cluster under
//! test, kinesis-local and dynalite running locally with a stream and a KCL
//! lease table, a ConsumerPool and a ShardGroup whose Kinesis source and
//! lease table point at those emulators (the operator runs in-process, or as
//! a local binary, so it reaches loopback), the operator, a producer, and
//! consumer pods ([`crate::consumers`]). Reshard calls and the waits on the
//! published assignment live here too (what counts as settled is in
//! `crate::settled`); the verdict is in [`crate::verdict`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use shardring_crds::CONTROLLER_CLASS_LABEL;
use shardring_crds::{AssignmentDocument, ConsumerPool, ShardGroup};
use shardring_dev::demo::producer::Producer;
use shardring_devkit::emulators::Emulator;

use crate::cluster::Cluster;
use crate::consumers::{ConsumerCommand, ConsumerSpec, Pods};
use crate::namespace::{apply_crds, create_namespace, delete_namespace, unique_namespace};
use crate::operator::{Operator, OperatorMode};
use crate::published::assignment_document;
use crate::settled::settled;
use crate::stream;
use shardring_dev::demo::consumers::ConsumerSettings;
use shardring_devkit::wait::{Probe, WaitError, wait_for_every};

pub use crate::error::HarnessError;
pub use crate::settings::{
    CONFIG_MAP, CONTROLLER_CLASS, DRAIN_TIMEOUT, LEASE_FAILOVER, MANAGER, MIN_READY, NAME, REGION,
    STEP_TIMEOUT,
};

/// How often a wait for a settled assignment looks.
const SETTLE_POLL: Duration = Duration::from_millis(100);
/// How often [`Harness::wait_revoking`] looks.
const FAST_POLL: Duration = Duration::from_millis(20);
/// Records per PutRecords call, and the pause between calls.
const BATCH: usize = 10;
const BATCH_INTERVAL: Duration = Duration::from_millis(100);

pub(crate) fn aws<E: std::error::Error + 'static>(error: E) -> HarnessError {
    HarnessError::Aws(aws_sdk_kinesis::error::DisplayErrorContext(&error).to_string())
}

/// One scenario's world. Dropping it kills the consumers, the operator, the
/// producer and the emulators; [`Harness::cleanup`] also deletes the namespace.
pub struct Harness {
    /// Client of the cluster under test.
    pub client: Client,
    /// The scenario's own namespace.
    pub namespace: String,
    /// kinesis-local client (producer, reshards, ListShards).
    pub kinesis: aws_sdk_kinesis::Client,
    /// The consumer pods and their processes.
    pub pods: Pods,
    /// How the operator reaches the API server (the cluster under test, or
    /// a relay in front of it).
    operator_cluster: Cluster,
    mode: OperatorMode,
    operator: Option<Operator>,
    producer: Option<Producer>,
    _emulators: (Emulator, Emulator),
}

impl Harness {
    /// Starts the emulators, creates the stream (`shards` shards) and the
    /// lease table, a fresh namespace with the pool and the ShardGroup, and
    /// the operator. No pods and no producer yet.
    pub async fn start(
        cluster: Cluster,
        mode: OperatorMode,
        scenario: &str,
        shards: u32,
    ) -> Result<Self, HarnessError> {
        Self::start_via(cluster.clone(), cluster, mode, scenario, shards).await
    }

    /// [`Self::start`], with the operator reaching the API server as
    /// `operator_cluster` says (its client in-process, its kubeconfig as a
    /// binary) while the suite and the consumers use `cluster`.
    pub async fn start_via(
        cluster: Cluster,
        operator_cluster: Cluster,
        mode: OperatorMode,
        scenario: &str,
        shards: u32,
    ) -> Result<Self, HarnessError> {
        let client = cluster.client.clone();
        let binary = reference_consumer().await?;
        let (kinesis_emulator, dynamo_emulator) = tokio::task::spawn_blocking(|| {
            Ok::<_, HarnessError>((Emulator::start_kinesis()?, Emulator::start_dynamodb()?))
        })
        .await
        .map_err(|e| HarnessError::Aws(e.to_string()))??;
        let (kinesis_url, dynamo_url) = (kinesis_emulator.endpoint(), dynamo_emulator.endpoint());
        let sdk = shardring_consumer::clients::sdk_config(Some(REGION), true).await;
        let kinesis = shardring_consumer::clients::kinesis_client(&sdk, Some(&kinesis_url));
        let dynamodb = shardring_consumer::clients::dynamodb_client(&sdk, Some(&dynamo_url));
        kinesis
            .create_stream()
            .stream_name(NAME)
            .shard_count(i32::try_from(shards).map_err(aws)?)
            .send()
            .await
            .map_err(aws)?;
        stream::wait_active(&kinesis, NAME).await?;
        shardring_consumer::lease::create_table(&dynamodb, NAME, Duration::from_secs(30))
            .await
            .map_err(|e| HarnessError::Aws(e.to_string()))?;

        let namespace = unique_namespace(scenario);
        apply_crds(&client).await?;
        create_namespace(&client, &namespace).await?;
        let dir = files_dir(&namespace);
        let ready = async {
            apply_pool_and_group(
                &client,
                &namespace,
                kinesis_group_spec(&kinesis_url, &dynamo_url),
            )
            .await?;
            std::fs::create_dir_all(&dir)?;
            Ok::<_, HarnessError>(
                Operator::start(&operator_cluster, &namespace, REGION, mode).await?,
            )
        };
        let operator = match ready.await {
            Ok(operator) => operator,
            Err(error) => {
                // Nothing else will clean up a namespace whose harness never started.
                let _ = delete_namespace(&client, &namespace).await;
                return Err(error);
            }
        };
        eprintln!(
            "e2e[{scenario}]: namespace {namespace}, stream {NAME} ({shards} shards) on {kinesis_url}, lease table on {dynamo_url}, files in {}",
            dir.display()
        );
        let spec = ConsumerSpec {
            command: ConsumerCommand::Shards(ConsumerSettings {
                binary,
                region: REGION.to_owned(),
                stream: NAME.to_owned(),
                lease_table: NAME.to_owned(),
                kinesis_endpoint: kinesis_url,
                dynamodb_endpoint: dynamo_url,
                failover: LEASE_FAILOVER,
                drain_deadline: DRAIN_TIMEOUT,
                kubeconfig: cluster.kubeconfig.clone(),
            }),
            namespace: namespace.clone(),
            dir,
        };
        Ok(Self {
            pods: Pods::new(client.clone(), spec),
            client,
            namespace,
            kinesis,
            operator_cluster,
            mode,
            operator: Some(operator),
            producer: None,
            _emulators: (kinesis_emulator, dynamo_emulator),
        })
    }

    /// Adds pods `names` together (see [`Pods::add`]) and waits until the
    /// operator counts every live pod eligible (past the pool's
    /// [`MIN_READY`]): what comes next in a scenario (a deletion, a
    /// reshard) then finds them in the pool, as a rollout with
    /// `minReadySeconds` waits for them.
    pub async fn add_pods(&mut self, names: &[&str]) -> Result<(), HarnessError> {
        self.pods.add_eligible(names).await
    }

    /// Starts the producer (sequenced records over many partition keys).
    pub fn start_producer(&mut self) {
        self.producer = Some(Producer::start(
            self.kinesis.clone(),
            NAME.to_owned(),
            BATCH,
            BATCH_INTERVAL,
        ));
    }

    /// Stops the producer; returns every record Kinesis accepted.
    pub async fn stop_producer(&mut self) -> Vec<shardring_consumer::check::ProducedRecord> {
        match self.producer.take() {
            Some(producer) => {
                let (produced, failures) = producer.stop().await;
                if failures > 0 {
                    eprintln!(
                        "e2e: {failures} PutRecords calls or entries failed (not expected back)"
                    );
                }
                produced
            }
            None => Vec::new(),
        }
    }

    /// Stops the operator (graceful for in-process, kill for a binary).
    pub async fn stop_operator(&mut self) -> Result<(), HarnessError> {
        if let Some(operator) = self.operator.take() {
            operator.stop().await?;
        }
        Ok(())
    }

    /// Starts the operator again after [`Self::stop_operator`] and waits
    /// until it is ready (`/readyz`); returns how long that took.
    pub async fn start_operator(&mut self) -> Result<Duration, HarnessError> {
        let started = tokio::time::Instant::now();
        let operator =
            Operator::start(&self.operator_cluster, &self.namespace, REGION, self.mode).await?;
        let operator = self.operator.insert(operator);
        operator.wait_ready(STEP_TIMEOUT).await?;
        Ok(started.elapsed())
    }

    /// How the operator reaches the API server.
    pub fn operator_cluster(&self) -> &Cluster {
        &self.operator_cluster
    }

    /// The running operator, if any.
    pub fn operator(&self) -> Option<&Operator> {
        self.operator.as_ref()
    }

    /// The running operator, if any, to check or stop.
    pub fn operator_mut(&mut self) -> Option<&mut Operator> {
        self.operator.as_mut()
    }

    /// The published document, if any.
    pub async fn document(&self) -> Result<Option<AssignmentDocument>, HarnessError> {
        published(&self.client, &self.namespace).await
    }

    /// Waits until the assignment is settled for the live pods: every open
    /// shard of the stream is active on a live pod, nothing is revoking or
    /// pending, the document names exactly the live pods, the load spread
    /// is within one, and every pod holding shards has processed a record.
    pub async fn wait_settled(&mut self, what: &str) -> Result<AssignmentDocument, HarnessError> {
        let kinesis = &self.kinesis;
        wait_settled_for(
            what,
            &self.client,
            &self.namespace,
            self.operator.as_mut(),
            &mut self.pods,
            || stream::open_shards(kinesis, NAME),
        )
        .await
    }

    /// Waits until the published document revokes a shard from `pod`,
    /// looking every [`FAST_POLL`]: a step that must act while the revoke is
    /// in flight (before the handoff could complete) acts within that.
    pub async fn wait_revoking(&self, pod: &str) -> Result<(), HarnessError> {
        let what = format!("a shard of {pod} revoking");
        wait_for_every(FAST_POLL, &what, STEP_TIMEOUT, || async {
            let revoking = self
                .document()
                .await?
                .is_some_and(|d| d.pods.get(pod).is_some_and(|p| !p.revoking.is_empty()));
            Ok::<_, HarnessError>(if revoking {
                Probe::Done(())
            } else {
                Probe::Pending("nothing revoking".into())
            })
        })
        .await?;
        Ok(())
    }

    /// Waits until `pod` owns no shard in the published document (its
    /// handoffs are complete), looking every [`FAST_POLL`] so that the wait
    /// also measures when that document appeared; returns how long it took.
    pub async fn wait_owns_nothing(&self, pod: &str) -> Result<Duration, HarnessError> {
        let started = tokio::time::Instant::now();
        let what = format!("{pod} to own no shard");
        wait_for_every(FAST_POLL, &what, STEP_TIMEOUT, || async {
            let doc = self.document().await?;
            let owned: Vec<String> = doc
                .iter()
                .flat_map(|d| d.shards.iter())
                .filter(|(_, r)| r.owner.as_deref() == Some(pod))
                .map(|(id, r)| format!("{id} ({:?})", r.state))
                .collect();
            Ok::<_, HarnessError>(if owned.is_empty() && doc.is_some() {
                Probe::Done(())
            } else {
                Probe::Pending(format!("owns {owned:?}"))
            })
        })
        .await?;
        Ok(started.elapsed())
    }

    /// Splits the open shard with the widest hash key range in two;
    /// returns the parent.
    pub async fn split_widest(&self) -> Result<String, HarnessError> {
        stream::split_widest(&self.kinesis, NAME).await
    }

    /// Merges the first two adjacent open shards; returns them.
    pub async fn merge_adjacent(&self) -> Result<(String, String), HarnessError> {
        stream::merge_adjacent(&self.kinesis, NAME).await
    }

    /// UpdateShardCount to `target` with uniform scaling.
    pub async fn update_shard_count(&self, target: u32) -> Result<(), HarnessError> {
        stream::update_shard_count(&self.kinesis, NAME, target).await
    }

    /// Child → parents of every shard the stream ever had.
    pub async fn parents(&self) -> Result<BTreeMap<String, Vec<String>>, HarnessError> {
        stream::parents(&self.kinesis, NAME).await
    }

    /// Stops everything and deletes the namespace (leftover ShardGroup
    /// finalizers dropped first, since the operator is gone by then).
    pub async fn cleanup(mut self) -> Result<(), HarnessError> {
        let _ = self.stop_producer().await;
        let stopped = self.stop_operator().await;
        self.pods.kill_all().await;
        delete_namespace(&self.client, &self.namespace).await?;
        stopped
    }
}

/// The ShardGroup's spec: it reads the stream on the local emulators, with
/// short drain and failover times so scenarios are quick.
fn kinesis_group_spec(kinesis_url: &str, dynamo_url: &str) -> serde_json::Value {
    json!({
        "source": {"kinesis": {
            "streamName": NAME, "region": REGION, "endpoint": kinesis_url,
            "refreshInterval": "1s"
        }},
        "leaseTable": {"tableName": NAME, "region": REGION, "endpoint": dynamo_url},
        "handoff": {
            "drainTimeout": format!("{}ms", DRAIN_TIMEOUT.as_millis()),
            "leaseFailover": format!("{}ms", LEASE_FAILOVER.as_millis())
        },
        "rebalance": {"delay": "2s"}
    })
}

/// Applies the pool [`NAME`], which selects `app=orders` pods after
/// [`MIN_READY`], and the ShardGroup [`NAME`] on it with `spec` (its
/// source and settings; `poolRef` is added), served by the suite's own
/// operator only (an operator installed in the cluster, of no class, never
/// acts on it).
pub(crate) async fn apply_pool_and_group(
    client: &Client,
    namespace: &str,
    mut spec: serde_json::Value,
) -> Result<(), HarnessError> {
    let pool: ConsumerPool = serde_json::from_value(json!({
        "apiVersion": "shardring.io/v1alpha1",
        "kind": "ConsumerPool",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": NAME}}, "minReadySeconds": MIN_READY.as_secs()}
    }))?;
    spec["poolRef"] = json!({"name": NAME});
    let group: ShardGroup = serde_json::from_value(json!({
        "apiVersion": "shardring.io/v1alpha1",
        "kind": "ShardGroup",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {CONTROLLER_CLASS_LABEL: CONTROLLER_CLASS},
        },
        "spec": spec
    }))?;
    let params = PatchParams::apply(MANAGER).force();
    Api::<ConsumerPool>::namespaced(client.clone(), namespace)
        .patch(NAME, &params, &Patch::Apply(&pool))
        .await?;
    Api::<ShardGroup>::namespaced(client.clone(), namespace)
        .patch(NAME, &params, &Patch::Apply(&group))
        .await?;
    Ok(())
}

/// The reference consumer binary (see `shardring_dev::demo::consumers::locate`).
pub(crate) async fn reference_consumer() -> Result<PathBuf, HarnessError> {
    tokio::task::spawn_blocking(|| {
        shardring_dev::demo::consumers::locate(None).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| HarnessError::Consumer(e.to_string()))?
    .map_err(HarnessError::Consumer)
}

/// The document published in `namespace` (ConfigMap [`CONFIG_MAP`]), if any.
pub(crate) async fn published(
    client: &Client,
    namespace: &str,
) -> Result<Option<AssignmentDocument>, HarnessError> {
    let maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    match maps.get_opt(CONFIG_MAP).await? {
        Some(map) => Ok(Some(assignment_document(&map)?)),
        None => Ok(None),
    }
}

/// Polls the document published in `namespace` until it is settled for
/// the live `pods` and the partitions `open` lists (see `crate::settled`),
/// failing at once when `operator` or a live pod's consumer stopped.
pub(crate) async fn wait_settled_for<F, Fut>(
    what: &str,
    client: &Client,
    namespace: &str,
    mut operator: Option<&mut Operator>,
    pods: &mut Pods,
    mut open: F,
) -> Result<AssignmentDocument, HarnessError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<String>, HarnessError>>,
{
    let what = format!("{what}: a settled, balanced assignment");
    let started = tokio::time::Instant::now();
    loop {
        if let Some(operator) = operator.as_deref_mut() {
            operator.check_running()?;
        }
        pods.check_alive()?;
        let open = open().await?;
        let seen = match published(client, namespace).await? {
            Some(doc) => match settled(&doc, &open, &pods.live(), |p| pods.has_read(p)) {
                Ok(()) => return Ok(doc),
                Err(seen) => seen,
            },
            None => format!("no ConfigMap {CONFIG_MAP} yet"),
        };
        if started.elapsed() >= STEP_TIMEOUT {
            return Err(WaitError::Timeout {
                what,
                waited: started.elapsed(),
                last: seen,
            }
            .into());
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}

/// Where the scenario's files are kept.
pub fn files_dir(namespace: &str) -> PathBuf {
    std::env::temp_dir().join(namespace)
}
