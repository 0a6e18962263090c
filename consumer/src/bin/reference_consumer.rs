//! `shardring-reference-consumer`: a consumer pod's process that follows the
//! shardring contract with the `shardring-consumer` library and appends every
//! processed record to a JSON-lines log, for the e2e suite, the demo and the
//! checker (`shardring_consumer::check`). It reads its view from a mounted
//! ConfigMap file, a downward-API annotations file, or a ConfigMap watch,
//! and with `--endpoint-url` also from the operator's consumer endpoint,
//! beside the other source (the newest epoch wins), acknowledging there the
//! release of every revoked shard; on SIGTERM it reads on until its shards are revoked or the drain deadline
//! passes, then checkpoints, releases and exits. With `--rabbitmq-url` its
//! partitions are RabbitMQ queues instead of Kinesis shards: it consumes
//! the queues its view makes active with the queue worker
//! (`shardring_consumer::rabbitmq`) and logs every message, and every end
//! of a hold, for the queue checker.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use shardring_consumer::clients;
use shardring_consumer::lease::{LeaseConfig, LeaseManager, create_table};
use shardring_consumer::partitions::{PartitionConfig, PartitionWorker};
use shardring_consumer::rabbitmq::log::QueueLog;
use shardring_consumer::rabbitmq::{QueueConfig, QueueReader, redact};
use shardring_consumer::reader::ReaderOptions;
use shardring_consumer::reference::RecordLog;
use shardring_consumer::view::endpoint::{
    EndpointArgs, EndpointClient, EndpointSource, EndpointStatus, LoadMeter, LoadReporter, Metered,
    ReleaseSender, split_group,
};
use shardring_consumer::view::file::{FileFormat, FileSource};
use shardring_consumer::view::{self, AssignmentView, Sources};
use shardring_consumer::worker::{Worker, WorkerConfig, termination_signal};
use tokio::sync::watch;

/// Reads the shards shardring assigns to this pod and logs every record.
#[derive(Debug, Parser)]
#[command(name = "shardring-reference-consumer", version)]
struct Args {
    /// This pod's name (the lease owner and the key into the assignment).
    #[arg(long, env = "POD_NAME")]
    pod: String,
    /// Kinesis stream name or ARN (not with --rabbitmq-url).
    #[arg(
        long,
        env = "SHARDRING_STREAM",
        required_unless_present = "rabbitmq_url"
    )]
    stream: Option<String>,
    /// KCL-format DynamoDB lease table (not with --rabbitmq-url).
    #[arg(
        long,
        env = "SHARDRING_LEASE_TABLE",
        required_unless_present = "rabbitmq_url"
    )]
    lease_table: Option<String>,
    /// Consume RabbitMQ queues instead of Kinesis shards: the broker, as
    /// `amqp://user:password@host:5672/<vhost>` (each partition is the
    /// queue of that name).
    #[arg(long, env = "SHARDRING_RABBITMQ_URL", conflicts_with_all = ["stream", "lease_table"])]
    rabbitmq_url: Option<String>,
    /// With --rabbitmq-url: most messages unacknowledged per queue.
    #[arg(long, env = "SHARDRING_RABBITMQ_PREFETCH", default_value_t = 20)]
    prefetch: u16,
    /// Create the lease table if it does not exist (tests and demos).
    #[arg(long)]
    create_lease_table: bool,
    /// AWS region.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    region: String,
    /// Kinesis endpoint override (e.g. kinesis-local).
    #[arg(long, env = "SHARDRING_KINESIS_ENDPOINT")]
    kinesis_endpoint: Option<String>,
    /// DynamoDB endpoint override (e.g. dynalite).
    #[arg(long, env = "SHARDRING_DYNAMODB_ENDPOINT")]
    dynamodb_endpoint: Option<String>,
    /// Use dummy static credentials (the local emulators accept any).
    /// Defaults to on when an endpoint override is given.
    #[arg(long)]
    emulator_credentials: Option<bool>,
    /// The mounted assignment ConfigMap: its directory or its
    /// `assignment.json` / `assignment.json.gz` file.
    #[arg(long, env = "SHARDRING_VIEW_FILE", group = "source")]
    view_file: Option<PathBuf>,
    /// The downward-API annotations file (needs --shard-group).
    #[arg(
        long,
        env = "SHARDRING_ANNOTATIONS_FILE",
        group = "source",
        requires = "shard_group"
    )]
    annotations_file: Option<PathBuf>,
    /// The ShardGroup whose annotation (or endpoint view) to read
    /// (`<namespace>/<name>`, or its name in --namespace).
    #[arg(long, env = "SHARDRING_SHARD_GROUP")]
    shard_group: Option<String>,
    /// The consumer endpoint (beside the view source above, or alone).
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Watch this assignment ConfigMap through the API (needs get/list/watch on it).
    #[arg(long, env = "SHARDRING_CONFIGMAP", group = "source")]
    configmap: Option<String>,
    /// Namespace of the ConfigMap (and of a --shard-group given by name).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
    /// How often to poll a view file, in milliseconds.
    #[arg(long, default_value_t = 200)]
    poll_ms: u64,
    /// Lease failover time in milliseconds (counter unchanged this long = expired).
    #[arg(long, env = "SHARDRING_FAILOVER_MS", default_value_t = 10_000)]
    failover_ms: u64,
    /// After SIGTERM, keep reading this long waiting for the revoke, in milliseconds.
    #[arg(long, env = "SHARDRING_DRAIN_DEADLINE_MS", default_value_t = 25_000)]
    drain_deadline_ms: u64,
    /// Wait after an empty GetRecords, in milliseconds.
    #[arg(long, default_value_t = 200)]
    idle_ms: u64,
    /// With --endpoint-url: how often to report the load read per shard
    /// (for balance: throughput), in milliseconds.
    #[arg(long, env = "SHARDRING_LOAD_REPORT_MS", default_value_t = 10_000)]
    load_report_ms: u64,
    /// Append processed records (JSON lines) to this file.
    #[arg(long, env = "SHARDRING_RECORD_LOG")]
    log: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(args).await {
        Ok(code) => code,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (publisher, view) = view::channel();
    let mut sources = Sources::new(publisher);
    let interval = Duration::from_millis(args.poll_ms);
    if let Some(path) = args.view_file.clone() {
        sources.start(|publisher| {
            FileSource {
                path,
                pod: args.pod.clone(),
                format: FileFormat::Document,
                interval,
            }
            .spawn(publisher)
        });
    } else if let Some(path) = args.annotations_file.clone() {
        sources.start(|publisher| {
            FileSource {
                path,
                pod: args.pod.clone(),
                format: FileFormat::Annotations {
                    shard_group: args.shard_group.clone().unwrap_or_default(),
                },
                interval,
            }
            .spawn(publisher)
        });
    } else if let Some(name) = args.configmap.clone() {
        let task = watch_configmap(&args, name, sources.publisher().clone()).await?;
        sources.add(task);
    }
    // The endpoint runs beside the source above: all feed one publisher and
    // the newest epoch wins, so the endpoint being down loses nothing.
    let mut endpoint_parts = EndpointParts::default();
    if let Some(config) = args.endpoint.config() {
        let Some(shard_group) = &args.shard_group else {
            anyhow::bail!("--endpoint-url needs --shard-group");
        };
        let (namespace, group) = split_group(shard_group, &args.namespace);
        let client = EndpointClient::new(config)?;
        let endpoint = EndpointSource {
            client: client.clone(),
            namespace: namespace.clone(),
            group: group.clone(),
            wait: args.endpoint.wait(),
        }
        .spawn(sources.publisher().clone());
        endpoint_parts.handover = Some(endpoint.status.clone());
        sources.add(endpoint.task);
        endpoint_parts.load_reporter = Some(LoadReporter::spawn(
            client.clone(),
            namespace.clone(),
            group.clone(),
            view.clone(),
            endpoint_parts.meter.clone(),
            Duration::from_millis(args.load_report_ms),
        ));
        endpoint_parts.release_acks =
            Some(ReleaseSender::spawn(client, namespace, group, view.clone()));
        tracing::info!(url = ?args.endpoint.endpoint_url, %shard_group, "consumer endpoint: long-polling the view, acknowledging releases, reporting load");
    }
    if sources.is_empty() {
        anyhow::bail!(
            "give a view source: --view-file, --annotations-file, --configmap or --endpoint-url"
        );
    }
    match args.rabbitmq_url.clone() {
        Some(url) => run_queues(&args, &url, view, endpoint_parts).await?,
        None => run_shards(&args, view, endpoint_parts).await?,
    }
    drop(sources);
    Ok(ExitCode::SUCCESS)
}

/// What the consumer endpoint gives a worker, when it is on.
#[derive(Default)]
struct EndpointParts {
    /// The release acknowledgements.
    release_acks: Option<ReleaseSender>,
    /// The endpoint source's status (the handed-over checkpoints).
    handover: Option<watch::Receiver<EndpointStatus>>,
    /// What the worker read, per shard, for the load reports.
    meter: LoadMeter,
    /// Kept alive while the worker runs.
    load_reporter: Option<LoadReporter>,
}

/// Kinesis shards with KCL leases.
async fn run_shards(
    args: &Args,
    view: AssignmentView,
    endpoint: EndpointParts,
) -> anyhow::Result<()> {
    let (Some(stream), Some(table)) = (args.stream.clone(), args.lease_table.clone()) else {
        anyhow::bail!("give --stream and --lease-table (or --rabbitmq-url)");
    };
    let emulator = args
        .emulator_credentials
        .unwrap_or(args.kinesis_endpoint.is_some() || args.dynamodb_endpoint.is_some());
    let config = clients::sdk_config(Some(&args.region), emulator).await;
    let kinesis = clients::kinesis_client(&config, args.kinesis_endpoint.as_deref());
    let dynamodb = clients::dynamodb_client(&config, args.dynamodb_endpoint.as_deref());
    if args.create_lease_table {
        create_table(&dynamodb, &table, Duration::from_secs(60)).await?;
    }
    let failover = Duration::from_millis(args.failover_ms);
    let leases = Arc::new(LeaseManager::new(
        dynamodb,
        LeaseConfig {
            table: table.clone(),
            worker_id: args.pod.clone(),
            failover,
        },
    ));
    let log = Arc::new(Metered {
        inner: RecordLog::open(&args.log)?,
        meter: endpoint.meter,
    });
    let mut worker_config = WorkerConfig::new(stream.clone(), failover);
    worker_config.drain_deadline = Duration::from_millis(args.drain_deadline_ms);
    worker_config.tick = Duration::from_millis(100);
    worker_config.reader = ReaderOptions {
        idle_wait: Duration::from_millis(args.idle_ms),
        ..ReaderOptions::default()
    };
    tracing::info!(pod = %args.pod, %stream, %table, "reference consumer started");
    let mut worker = Worker::new(kinesis, leases, view, log, worker_config);
    if let Some(acks) = endpoint.release_acks {
        worker = worker.with_release_acks(acks);
    }
    let report = worker.run(termination_signal()).await;
    tracing::info!(
        completed = ?report.completed,
        released = report.released,
        lost = report.lost,
        drain_deadline_passed = report.drain_deadline_passed,
        "reference consumer exiting"
    );
    Ok(())
}

/// RabbitMQ queues, with manual acknowledgements and a bounded prefetch.
async fn run_queues(
    args: &Args,
    url: &str,
    view: AssignmentView,
    endpoint: EndpointParts,
) -> anyhow::Result<()> {
    let config = QueueConfig {
        prefetch: args.prefetch,
        ..QueueConfig::new(url)
    };
    let reader = Arc::new(
        QueueReader::new(Arc::new(QueueLog::open(&args.log)?), config, &args.pod)
            .following(view.clone()),
    );
    let worker_config = PartitionConfig {
        tick: Duration::from_millis(50),
        idle: Duration::from_millis(10),
        drain_deadline: Duration::from_millis(args.drain_deadline_ms),
        ..PartitionConfig::new(args.pod.clone())
    };
    // Without the endpoint nothing is handed over (a queue keeps its own
    // position anyway).
    let handover = endpoint
        .handover
        .unwrap_or_else(|| watch::channel(EndpointStatus::default()).1);
    let mut worker = PartitionWorker::new(view, handover, Arc::clone(&reader), worker_config);
    if let Some(acks) = endpoint.release_acks {
        worker = worker.with_release_acks(acks);
    }
    tracing::info!(pod = %args.pod, url = %redact(url), prefetch = args.prefetch, connected = reader.connect().await, "reference consumer started on RabbitMQ");
    let report = worker.run(termination_signal()).await;
    reader.close().await;
    tracing::info!(
        started = report.started,
        stopped = report.stopped,
        acked = report.acked,
        failed = report.failed,
        drain_deadline_passed = report.drain_deadline_passed,
        "reference consumer exiting"
    );
    Ok(())
}

#[cfg(feature = "kube")]
async fn watch_configmap(
    args: &Args,
    name: String,
    publisher: view::ViewPublisher,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let client = view::kube::client().await?;
    Ok(view::kube::ConfigMapSource {
        namespace: args.namespace.clone(),
        name,
        pod: args.pod.clone(),
    }
    .spawn(client, publisher))
}

#[cfg(not(feature = "kube"))]
async fn watch_configmap(
    _args: &Args,
    _name: String,
    _publisher: shardring_consumer::view::ViewPublisher,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    anyhow::bail!("--configmap needs the `kube` feature of shardring-consumer")
}
