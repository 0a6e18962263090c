//! The RabbitMQ scenarios' harness: a broker of the test's own
//! ([`shardring_devkit::broker`], Debian's rabbitmq-server on free loopback
//! ports) with a vhost of partition queues and a listing-only management
//! user, whose credentials are a Secret in the operator's namespace; a
//! fresh namespace with a ConsumerPool and a ShardGroup whose source is
//! `rabbitmq` (the queues matching `orders\.[0-9]+`, listed every second);
//! the operator with its consumer endpoint on loopback; consumer pods
//! backed by reference consumers in their RabbitMQ mode (the queue worker,
//! the view from the ConfigMap watch and the endpoint, release
//! acknowledgements, a token bound to the pod); a producer publishing to
//! every queue. What counts as settled is the Kinesis scenarios' rule with
//! the harness's queues for shards; the verdict is [`verdict`].

pub mod verdict;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use shardring_crds::AssignmentDocument;
use shardring_dev::demo::queues::producer::QueueProducer;
use shardring_dev::demo::queues::{QueueConsumerSettings, QueueEndpoint};
use shardring_devkit::broker::{ADMIN_PASSWORD, ADMIN_USER, Broker};
use shardring_devkit::wait::{Probe, wait_for};

use crate::cluster::Cluster;
use crate::consumers::{ConsumerCommand, ConsumerSpec, Pods};
use crate::harness::{
    HarnessError, MANAGER, NAME, REGION, STEP_TIMEOUT, apply_pool_and_group, files_dir, published,
    reference_consumer, wait_settled_for,
};
use crate::namespace::{apply_crds, create_namespace, delete_namespace, unique_namespace};
use crate::operator::{Operator, OperatorMode};
use crate::tokens::endpoint_ca;

/// The vhost of the partition queues.
pub const VHOST: &str = "orders";
/// The pattern a queue's name must match to be a partition.
pub const PATTERN: &str = r"orders\.[0-9]+";
/// The Secret holding the management API's credentials, in the operator's
/// namespace (the name `deploy/install.yaml`'s Role lets it read).
pub const CREDENTIALS_SECRET: &str = "shardring-rabbitmq";
/// The management user the operator lists queues as: the `monitoring` tag
/// and no permission on any resource of the vhost.
const LISTING_USER: &str = "shardring-listing";
const LISTING_PASSWORD: &str = "listing-only";
/// Messages unacknowledged per queue and consumer.
pub const PREFETCH: u16 = 10;
/// How often the producer publishes one message to every queue.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(10);
/// The group's drain timeout; a SIGTERMed consumer waits as long for its revoke.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// One RabbitMQ scenario's world; [`QueueHarness::cleanup`] stops it and
/// deletes the namespace.
pub struct QueueHarness {
    /// The suite's client.
    pub client: Client,
    /// The scenario's namespace.
    pub namespace: String,
    /// The broker.
    pub broker: Broker,
    /// The consumer pods and their processes.
    pub pods: Pods,
    /// The queues that are partitions now.
    queues: BTreeSet<String>,
    operator: Option<Operator>,
    producer: Option<QueueProducer>,
    /// Where the scenario's files are.
    pub dir: PathBuf,
}

impl QueueHarness {
    /// Sets up the vhost with `queues` partition queues on `broker`, the
    /// namespace, the credentials Secret, the pool and the group, and the
    /// operator (reaching the API server as `operator_cluster` says, in
    /// `mode`) with its endpoint; no pods and no producer yet.
    pub async fn start(
        cluster: &Cluster,
        operator_cluster: &Cluster,
        mode: OperatorMode,
        broker: Broker,
        scenario: &str,
        queues: u32,
    ) -> Result<Self, HarnessError> {
        let client = cluster.client.clone();
        let binary = reference_consumer().await?;
        let admin = broker.admin();
        let names: BTreeSet<String> = (0..queues).map(|i| format!("orders.{i}")).collect();
        let setup = async {
            admin.create_vhost(VHOST).await?;
            admin
                .create_user(LISTING_USER, LISTING_PASSWORD, "monitoring")
                .await?;
            admin
                .set_permissions(VHOST, LISTING_USER, "^$", "^$", "^$")
                .await?;
            for queue in &names {
                admin.declare_queue(VHOST, queue).await?;
            }
            Ok::<_, shardring_devkit::broker::BrokerError>(())
        };
        setup.await.map_err(broker_error)?;
        let namespace = unique_namespace(scenario);
        apply_crds(&client).await?;
        create_namespace(&client, &namespace).await?;
        let dir = files_dir(&namespace);
        let home = operator_cluster
            .operator_namespace
            .clone()
            .unwrap_or_else(|| namespace.clone());
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let endpoint = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let ready = async {
            std::fs::create_dir_all(&dir)?;
            apply_credentials(&client, &home).await?;
            apply_pool_and_group(&client, &namespace, group_spec(&broker.management_url())).await?;
            let operator =
                Operator::start_with_endpoint(operator_cluster, &namespace, REGION, mode, endpoint)
                    .await?;
            let ca_file = endpoint_ca(&client, &namespace, &dir)
                .await
                .map_err(|e| HarnessError::Consumer(e.to_string()))?;
            Ok::<_, HarnessError>((operator, ca_file))
        };
        let (operator, ca_file) = match ready.await {
            Ok(ready) => ready,
            Err(error) => {
                let _ = delete_namespace(&client, &namespace).await;
                return Err(error);
            }
        };
        eprintln!(
            "e2e[{scenario}]: namespace {namespace}, broker {} (AMQP {}, management {}), {queues} queues in vhost {VHOST}, endpoint {endpoint}, files in {}",
            broker.node(),
            broker.ports().amqp,
            broker.management_url(),
            dir.display()
        );
        let settings = QueueConsumerSettings {
            binary,
            url: broker.amqp_url(ADMIN_USER, ADMIN_PASSWORD, VHOST),
            prefetch: PREFETCH,
            drain_deadline: DRAIN_TIMEOUT,
            endpoint: QueueEndpoint {
                url: format!("https://{endpoint}"),
                ca_file,
                shard_group: format!("{namespace}/{NAME}"),
            },
            kubeconfig: cluster.kubeconfig.clone(),
        };
        let spec = ConsumerSpec {
            command: ConsumerCommand::Queues(settings),
            namespace: namespace.clone(),
            dir: dir.clone(),
        };
        Ok(Self {
            pods: Pods::new(client.clone(), spec),
            client,
            namespace,
            broker,
            queues: names,
            operator: Some(operator),
            producer: None,
            dir,
        })
    }

    /// Starts the producer on every partition queue.
    pub fn start_producer(&mut self) {
        let url = self.broker.amqp_url(ADMIN_USER, ADMIN_PASSWORD, VHOST);
        self.producer = Some(QueueProducer::start(
            url,
            self.queues.iter().cloned(),
            PUBLISH_INTERVAL,
        ));
    }

    /// Adds pods `names` together and waits until the group counts every
    /// live pod eligible.
    pub async fn add_pods(&mut self, names: &[&str]) -> Result<(), HarnessError> {
        self.pods.add_eligible(names).await
    }

    /// Creates partition queue `name` and publishes to it too.
    pub async fn create_queue(&mut self, name: &str) -> Result<(), HarnessError> {
        self.broker
            .admin()
            .declare_queue(VHOST, name)
            .await
            .map_err(broker_error)?;
        self.queues.insert(name.to_owned());
        if let Some(producer) = &self.producer {
            producer.add_queue(name);
        }
        Ok(())
    }

    /// Stops publishing to `name`, waits until every message published to
    /// it was handled (a deleted queue's messages are gone with it), then
    /// deletes it.
    pub async fn drain_and_delete_queue(&mut self, name: &str) -> Result<(), HarnessError> {
        if let Some(producer) = &self.producer {
            producer.remove_queue(name);
        }
        self.queues.remove(name);
        let produced = self
            .producer
            .as_ref()
            .map(QueueProducer::produced)
            .unwrap_or_default();
        let wanted: Vec<_> = produced.into_iter().filter(|p| p.shard == name).collect();
        wait_for(
            &format!("every message of {name} handled"),
            STEP_TIMEOUT,
            || {
                let missing = verdict::read_logs(self.pods.logs()).map(|(records, _)| {
                    let seen: BTreeSet<&str> = records
                        .iter()
                        .filter(|r| r.shard == name)
                        .map(|r| r.sequence_number.as_str())
                        .collect();
                    wanted
                        .iter()
                        .filter(|p| !seen.contains(p.sequence_number.as_str()))
                        .count()
                });
                async move {
                    Ok::<_, HarnessError>(match missing? {
                        0 => Probe::Done(()),
                        n => Probe::Pending(format!("{n} not handled")),
                    })
                }
            },
        )
        .await?;
        self.broker
            .admin()
            .delete_queue(VHOST, name)
            .await
            .map_err(broker_error)
    }

    /// The published document, if any.
    pub async fn document(&self) -> Result<Option<AssignmentDocument>, HarnessError> {
        published(&self.client, &self.namespace).await
    }

    /// The queues that are partitions now, sorted.
    pub fn queues(&self) -> Vec<String> {
        self.queues.iter().cloned().collect()
    }

    /// Waits until every partition queue is active on a live pod, nothing
    /// is revoking, the load spread is within one and every pod holding
    /// queues has handled a message.
    pub async fn wait_settled(&mut self, what: &str) -> Result<AssignmentDocument, HarnessError> {
        let queues = self.queues();
        wait_settled_for(
            what,
            &self.client,
            &self.namespace,
            self.operator.as_mut(),
            &mut self.pods,
            || std::future::ready(Ok(queues.clone())),
        )
        .await
    }

    /// Stops the producer; returns every message confirmed and routed.
    pub async fn stop_producer(&mut self) -> Vec<shardring_consumer::check::ProducedRecord> {
        match self.producer.take() {
            Some(producer) => producer.stop().await.0,
            None => Vec::new(),
        }
    }

    /// Stops everything and deletes the namespace.
    pub async fn cleanup(mut self) -> Result<(), HarnessError> {
        let _ = self.stop_producer().await;
        if let Some(operator) = self.operator.take() {
            operator.stop().await?;
        }
        self.pods.kill_all().await;
        delete_namespace(&self.client, &self.namespace).await
    }
}

fn broker_error(error: shardring_devkit::broker::BrokerError) -> HarnessError {
    HarnessError::Broker(error.to_string())
}

/// The listing user's credentials as a `kubernetes.io/basic-auth` Secret in
/// the operator's namespace `home` (the same content in every run, so runs
/// side by side agree on it).
async fn apply_credentials(client: &Client, home: &str) -> Result<(), HarnessError> {
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": CREDENTIALS_SECRET, "namespace": home},
        "type": "kubernetes.io/basic-auth",
        "stringData": {"username": LISTING_USER, "password": LISTING_PASSWORD}
    }))?;
    Api::<Secret>::namespaced(client.clone(), home)
        .patch(
            CREDENTIALS_SECRET,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

/// The group's spec: its source is the vhost's queues matching
/// [`PATTERN`], listed every second.
fn group_spec(management_url: &str) -> serde_json::Value {
    json!({
        "source": {"rabbitmq": {
            "managementURL": management_url, "vhost": VHOST, "queuePattern": PATTERN,
            "credentialsSecret": CREDENTIALS_SECRET, "refreshInterval": "1s"
        }},
        "handoff": {"drainTimeout": format!("{}ms", DRAIN_TIMEOUT.as_millis())},
        "rebalance": {"delay": "1s"}
    })
}
