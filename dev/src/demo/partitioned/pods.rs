//! The static act's consumer pods, each a task of this process running what
//! a real consumer of a partitioned queue would: the consumer crate's
//! [`EndpointClient`] over HTTPS on loopback (trusting only the endpoint's
//! CA, with a demo-minted token in a token file, as a projected token
//! would be), its view source and release sender, and the static-partition
//! [`PartitionWorker`] with a handler that reads the in-memory [`Queue`]
//! from the checkpoint and writes what it did into the [`Ledger`]; in the
//! hot act also the load reporter, fed by the handler's byte counts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shardring_consumer::partitions::{
    PartitionConfig, PartitionContext, PartitionHandler, PartitionWorker,
};
use shardring_consumer::view::{
    self, AssignmentView,
    endpoint::{
        EndpointClient, EndpointConfig, EndpointHandle, EndpointSource, LoadMeter, LoadReporter,
        ReleaseSender,
    },
};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::ledger::Ledger;
use super::queue::Queue;

/// Messages per batch.
const BATCH: u64 = 25;
/// How long a long-poll waits for a newer view.
const LONG_POLL: Duration = Duration::from_secs(20);

/// Reads a partition of the queue: the checkpoint is the number of the
/// last message processed.
struct QueueHandler {
    pod: String,
    queue: Arc<Queue>,
    ledger: Arc<Ledger>,
    /// Time spent processing each batch (the batch in hand a stop waits for).
    work: Duration,
    /// Counts the bytes read per partition (the hot act).
    meter: Option<LoadMeter>,
}

impl PartitionHandler for QueueHandler {
    async fn process(
        &self,
        context: &PartitionContext,
        checkpoint: Option<&str>,
    ) -> anyhow::Result<Option<String>> {
        let from = match checkpoint {
            Some(last) => last.parse::<u64>()? + 1,
            // The handler's own start: the head of the queue.
            None => 0,
        };
        self.ledger.reading(&self.pod, &context.partition);
        let batch = self.queue.read(&context.partition, from, BATCH);
        let Some(last) = batch.end.checked_sub(1).filter(|_| !batch.is_empty()) else {
            return Ok(None);
        };
        tokio::time::sleep(self.work).await;
        if let Some(meter) = &self.meter {
            let messages = batch.end - batch.start;
            let bytes = messages * self.queue.message_bytes(&context.partition);
            meter.record(&context.partition, bytes, messages);
        }
        self.ledger.processed(&context.partition, batch);
        Ok(Some(last.to_string()))
    }

    fn opened(&self, context: &PartitionContext, _checkpoint: Option<&str>) {
        self.ledger.opened(&self.pod, &context.partition);
    }

    fn closed(&self, context: &PartitionContext, _checkpoint: Option<&str>) {
        self.ledger.closed(&self.pod, &context.partition);
    }
}

/// What one consumer pod needs.
pub(super) struct PodSetup {
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) group: String,
    /// `https://127.0.0.1:<port>`.
    pub(super) url: String,
    pub(super) token_file: PathBuf,
    pub(super) ca_file: PathBuf,
    pub(super) queue: Arc<Queue>,
    pub(super) ledger: Arc<Ledger>,
    pub(super) drain_deadline: Duration,
    pub(super) work: Duration,
    /// How often to report the load read (`None`: not at all).
    pub(super) load_report: Option<Duration>,
}

/// A pod's line to the endpoint: its client (token and CA files), the view
/// it long-polls and the release sender, as every demo consumer task has.
pub(in crate::demo) struct PodEndpoint {
    /// The client (the load reporter shares it).
    pub(in crate::demo) client: EndpointClient,
    /// The view the endpoint serves.
    pub(in crate::demo) assignment: AssignmentView,
    /// The long-poll task and its status (the handed-over checkpoints).
    pub(in crate::demo) source: EndpointHandle,
    /// Acknowledges releases.
    pub(in crate::demo) acks: ReleaseSender,
}

impl PodEndpoint {
    /// Connects pod `name` of `namespace` to group `group`'s views at `url`
    /// with the token and CA in `token_file` and `ca_file`; `None` (logged)
    /// when the client cannot be built.
    pub(in crate::demo) fn connect(
        name: &str,
        (namespace, group): (&str, &str),
        url: &str,
        token_file: PathBuf,
        ca_file: PathBuf,
    ) -> Option<Self> {
        let config = EndpointConfig {
            token_file,
            ca_file,
            ..EndpointConfig::new(url)
        };
        let client = match EndpointClient::new(config) {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(pod = %name, %error, "no endpoint client");
                return None;
            }
        };
        let (publisher, assignment) = view::channel();
        let source = EndpointSource {
            client: client.clone(),
            namespace: namespace.to_owned(),
            group: group.to_owned(),
            wait: LONG_POLL,
        }
        .spawn(publisher);
        let acks = ReleaseSender::spawn(client.clone(), namespace, group, assignment.clone());
        Some(Self {
            client,
            assignment,
            source,
            acks,
        })
    }
}

/// The pod's consumer: waits for `start` (the pod object exists and its
/// view is served), reads until `shutdown` and the drain that follows.
pub(super) async fn run(
    setup: PodSetup,
    start: oneshot::Receiver<()>,
    shutdown: CancellationToken,
) {
    if start.await.is_err() {
        return;
    }
    let Some(endpoint) = PodEndpoint::connect(
        &setup.name,
        (&setup.namespace, &setup.group),
        &setup.url,
        setup.token_file,
        setup.ca_file,
    ) else {
        return;
    };
    let meter = setup.load_report.map(|_| LoadMeter::default());
    let _reporter = setup.load_report.zip(meter.clone()).map(|(every, meter)| {
        LoadReporter::spawn(
            endpoint.client.clone(),
            setup.namespace.clone(),
            setup.group.clone(),
            endpoint.assignment.clone(),
            meter,
            every,
        )
    });
    let handler = Arc::new(QueueHandler {
        pod: setup.name.clone(),
        queue: setup.queue,
        ledger: setup.ledger,
        work: setup.work,
        meter,
    });
    let config = PartitionConfig {
        tick: Duration::from_millis(100),
        idle: Duration::from_millis(20),
        drain_deadline: setup.drain_deadline,
        stop_timeout: Duration::from_secs(5),
        ..PartitionConfig::new(setup.name.clone())
    };
    let report = PartitionWorker::new(
        endpoint.assignment,
        endpoint.source.status.clone(),
        handler,
        config,
    )
    .with_release_acks(endpoint.acks)
    .run(shutdown.cancelled())
    .await;
    tracing::info!(pod = %setup.name, ?report, "consumer exited");
    endpoint.source.task.abort();
}
