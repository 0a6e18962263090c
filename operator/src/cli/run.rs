//! `shardring run`: the operator process. It composes the runtime pieces in
//! order: logging, signal handling, the Kubernetes client, the metrics
//! registry and the `/metrics` `/healthz` `/readyz` server, the wait for the
//! CRDs, optional leader election, and the ShardGroup controller. It stops
//! gracefully on SIGTERM/SIGINT and exits with an error if the leader-election
//! task dies (a replica that cannot tell whether it leads must not write).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::controller::{
    Context, ControllerConfig, ControllerMetrics, Sources, WatchScope, run_controller,
};
use crate::endpoint::{EndpointMetrics, EndpointServer, EndpointServerConfig, EndpointState};
use crate::runtime::health::Health;
use crate::runtime::leader::{LeaderConfig, LeaderElector, LeaderMetrics, default_identity};
use crate::runtime::server::Server;
use crate::runtime::telemetry::{self, LogFormat};
use crate::runtime::{crd_wait, metrics, shutdown};
use crate::source::rabbitmq::KubeSecrets;
use crate::source::{Providers, SourceSettings};

/// Arguments of `shardring run`; every flag also reads an environment variable.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, env = "SHARDRING_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Elect a leader on a coordination.k8s.io Lease so several replicas are
    /// safe (only the leader writes).
    #[arg(long, env = "SHARDRING_LEADER_ELECTION")]
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "SHARDRING_LEASE_NAME", default_value = "shardring-leader")]
    pub lease_name: String,
    /// Namespace of the leader-election Lease (default: the operator's own
    /// namespace from POD_NAMESPACE, else the client's default namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Log format.
    #[arg(long, env = "SHARDRING_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter in EnvFilter syntax; RUST_LOG overrides it.
    #[arg(long, env = "SHARDRING_LOG_FILTER", default_value = "info")]
    pub log_filter: String,
    /// Watch only this namespace (default: all namespaces); the same as
    /// `--watch-namespaces` with one name.
    #[arg(long, env = "SHARDRING_NAMESPACE")]
    pub namespace: Option<String>,
    /// Watch only these namespaces, comma-separated (default: all): for an
    /// install whose Roles grant the operator those namespaces only (chart
    /// value `watchNamespaces`). Together with `--namespace`, both count.
    #[arg(long, env = "SHARDRING_WATCH_NAMESPACES", value_delimiter = ',')]
    pub watch_namespaces: Vec<String>,
    /// Do not watch Nodes (zones then come only from pod labels); for
    /// installations without cluster-wide read access to nodes.
    #[arg(long, env = "SHARDRING_NO_NODE_WATCH")]
    pub no_node_watch: bool,
    /// How long to wait for the CRDs to be established at start-up.
    #[arg(long, env = "SHARDRING_CRD_WAIT_TIMEOUT", default_value = "2m", value_parser = parse_duration)]
    pub crd_wait_timeout: Duration,
    /// Most ShardGroups reconciled at once.
    #[arg(long, env = "SHARDRING_CONCURRENCY", default_value_t = 8)]
    pub concurrency: u16,
    /// Most pod annotation writes in flight at once, over all ShardGroups
    /// (the API server answers an excess with 429, which is retried after
    /// its Retry-After).
    #[arg(long, env = "SHARDRING_WRITE_CONCURRENCY", default_value_t = crate::controller::apply::DEFAULT_WRITE_CONCURRENCY)]
    pub write_concurrency: usize,
    /// Serve only the ShardGroups labelled `shardring.io/controller-class=NAME`
    /// (default: only those without that label), so several operators can
    /// share a cluster.
    #[arg(long, env = "SHARDRING_CONTROLLER_CLASS")]
    pub controller_class: Option<String>,
    #[command(flatten)]
    pub endpoint: EndpointArgs,
}

/// The consumer endpoint's flags (see `docs/api.md`, "Consumer endpoint").
#[derive(Debug, clap::Args)]
pub struct EndpointArgs {
    /// Address of the consumer endpoint (HTTPS), served by the leader.
    #[arg(long, env = "SHARDRING_ENDPOINT_ADDR", default_value = "0.0.0.0:8443")]
    pub endpoint_addr: SocketAddr,
    /// Do not serve the consumer endpoint (consumers then read their views
    /// from the ConfigMap or their annotation only).
    #[arg(long, env = "SHARDRING_NO_ENDPOINT")]
    pub no_endpoint: bool,
    /// Directory of the endpoint's certificate in the kubernetes.io/tls
    /// Secret layout (tls.crt, tls.key, optional ca.crt), re-read when it
    /// changes. Without one, a self-signed development certificate is used.
    #[arg(
        long,
        env = "SHARDRING_ENDPOINT_TLS_DIR",
        default_value = "/etc/shardring/endpoint-tls"
    )]
    pub endpoint_tls_dir: PathBuf,
    /// Extra DNS name (or IP) of the self-signed certificate; repeatable.
    #[arg(long, env = "SHARDRING_ENDPOINT_DNS_NAME", value_delimiter = ',')]
    pub endpoint_dns_name: Vec<String>,
    /// Audience consumers' projected service-account tokens must be issued for.
    #[arg(long, env = "SHARDRING_ENDPOINT_AUDIENCE", default_value = shardring_crds::endpoint::DEFAULT_AUDIENCE)]
    pub endpoint_audience: String,
    /// Do not require a caller's address to be its pod's IP (behind a proxy,
    /// or for pods with hostNetwork).
    #[arg(long, env = "SHARDRING_ENDPOINT_NO_PEER_IP_CHECK")]
    pub endpoint_no_peer_ip_check: bool,
    /// Longest time a token's successful TokenReview is reused (never past
    /// the token's expiry).
    #[arg(long, env = "SHARDRING_ENDPOINT_TOKEN_CACHE_TTL", default_value = "60s", value_parser = parse_duration)]
    pub endpoint_token_cache_ttl: Duration,
    /// Requests per rate-limit window from one source IP (checked before the
    /// token is reviewed).
    #[arg(long, env = "SHARDRING_ENDPOINT_IP_LIMIT", default_value_t = 600)]
    pub endpoint_ip_limit: u64,
    /// Requests per rate-limit window from one pod.
    #[arg(long, env = "SHARDRING_ENDPOINT_POD_LIMIT", default_value_t = 120)]
    pub endpoint_pod_limit: u64,
    /// Length of a rate-limit window.
    #[arg(long, env = "SHARDRING_ENDPOINT_RATE_WINDOW", default_value = "10s", value_parser = parse_duration)]
    pub endpoint_rate_window: Duration,
    /// Most open connections to the endpoint; new ones past it are closed
    /// at once.
    #[arg(
        long,
        env = "SHARDRING_ENDPOINT_MAX_CONNECTIONS",
        default_value_t = 10_000
    )]
    pub endpoint_max_connections: usize,
}

impl EndpointArgs {
    /// The server's configuration; `namespace` is the operator's own.
    fn config(&self, namespace: &str) -> EndpointServerConfig {
        EndpointServerConfig {
            tls_dir: self.endpoint_tls_dir.clone(),
            dns_names: self.endpoint_dns_name.clone(),
            audience: self.endpoint_audience.clone(),
            peer_ip_check: !self.endpoint_no_peer_ip_check,
            token_cache_ttl: self.endpoint_token_cache_ttl,
            ip_limit: self.endpoint_ip_limit,
            pod_limit: self.endpoint_pod_limit,
            rate_window: self.endpoint_rate_window,
            max_connections: self.endpoint_max_connections,
            pod_name: std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()),
            ..EndpointServerConfig::new(self.endpoint_addr, namespace)
        }
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::crds::parse_duration(text).map_err(|e| e.to_string())
}

/// Runs the operator until SIGTERM/SIGINT.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    telemetry::init(args.log_format, &args.log_filter)?;
    let token = CancellationToken::new();
    shutdown::cancel_on_signal(&token)?;
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API (KUBECONFIG or in-cluster)")?;

    let mut registry = metrics::new_registry();
    let controller_metrics = ControllerMetrics::register(&mut registry);
    let leader_metrics = LeaderMetrics::register(&mut registry);
    let endpoint_metrics = EndpointMetrics::register(&mut registry);
    // The endpoint's state, made here so that its load books' metrics are
    // registered (the books serve the lease table's throughput too, with or
    // without the endpoint).
    let endpoint_state = EndpointState::default();
    endpoint_state.loads.register(&mut registry);
    // The operator's own namespace (POD_NAMESPACE): the Lease's, the
    // endpoint's self-signed Secret's, and the sources' credentials
    // Secrets'.
    let namespace = args
        .lease_namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    // The sources' providers share what groups of one kind can (one reader
    // per Kinesis stream); each kind loads its configuration (the AWS
    // chain) only when the first group of that kind appears.
    let settings = SourceSettings::default()
        .with_secrets(Arc::new(KubeSecrets::new(client.clone(), &namespace)));
    let providers = Providers::new(settings, Some(&mut registry));
    let sources = Sources::for_providers(Arc::new(providers));
    let health = Health::new();
    let server = Server::bind(args.metrics_addr, Arc::new(registry), health.clone()).await?;
    let server_task = tokio::spawn(server.serve(token.clone().cancelled_owned()));

    let crds = tokio::select! {
        result = crd_wait::wait_for_crds_established(client.clone(), crd_wait::SHARDRING_CRDS, args.crd_wait_timeout) => result,
        () = token.cancelled() => return finish(token, server_task, ExitCode::SUCCESS).await,
    };
    crds?;
    health.set_crds_established();

    // The election stops on its own token, cancelled only once the
    // controller has finished: a stopping leader keeps renewing (and so
    // keeps the Lease) until its in-flight reconciles wrote their last
    // write, and only then releases it. With one token, a standby could take
    // over while the old leader's last writes were still going out.
    let election = CancellationToken::new();
    let mut lease_task = None;
    let leader = if args.leader_election {
        let config = LeaderConfig::new(&args.lease_name, &namespace, &default_identity());
        config.validate()?;
        tracing::info!(lease = %args.lease_name, %namespace, identity = %config.identity, "leader election on");
        let handle = LeaderElector::new(client.clone(), config)
            .with_metrics(leader_metrics)
            .spawn(election.clone());
        lease_task = Some(handle.task);
        Some(handle.is_leader)
    } else {
        // Without election this replica writes as if it led: say so, or
        // an alert on "no replica leads" fires for every such install.
        leader_metrics.is_leader.set(1);
        None
    };

    // The consumer endpoint, served by the leader from the state the
    // controller fills; stopped with everything else on `token`.
    let (endpoint, endpoint_task) = if args.endpoint.no_endpoint {
        tracing::info!("consumer endpoint off (--no-endpoint)");
        (None, None)
    } else {
        let state = endpoint_state.clone();
        let server = EndpointServer::bind(
            args.endpoint.config(&namespace),
            client.clone(),
            state.clone(),
            endpoint_metrics,
            leader.clone(),
        )
        .await?;
        (Some(state), Some(tokio::spawn(server.serve(token.clone()))))
    };

    // The load books are the registered ones, with or without the endpoint
    // (whose own they are).
    let mut context = Context::builder(client, controller_metrics)
        .sources(sources)
        .loads(Arc::clone(&endpoint_state.loads))
        .publish_events(std::env::var("POD_NAME").ok());
    if let Some(leader) = leader {
        context = context.leader(leader);
    }
    if let Some(endpoint) = endpoint {
        context = context.endpoint(endpoint);
    }
    let config = ControllerConfig {
        scope: WatchScope::of(args.namespace.iter().chain(&args.watch_namespaces).cloned()),
        watch_nodes: !args.no_node_watch,
        concurrency: args.concurrency,
        write_concurrency: args.write_concurrency,
        controller_class: args.controller_class.clone(),
    };
    let controller = run_controller(context, config, Some(health), token.clone());
    tokio::pin!(controller);

    let code = match lease_task {
        Some(mut task) => tokio::select! {
            () = &mut controller => {
                // Shutdown, and the controller's last write is done: now
                // release the Lease (the election task has time to).
                election.cancel();
                if tokio::time::timeout(Duration::from_secs(10), &mut task).await.is_err() {
                    tracing::warn!("leader election did not stop in time");
                }
                ExitCode::SUCCESS
            }
            result = &mut task => {
                // Nothing cancels the election before the controller ends,
                // so the task ending first is always a failure.
                match result {
                    Ok(Ok(())) => tracing::error!("leader election stopped unexpectedly; exiting"),
                    Ok(Err(error)) => tracing::error!(%error, "leader election failed; exiting"),
                    Err(error) => tracing::error!(%error, "leader election task panicked; exiting"),
                }
                token.cancel();
                controller.await;
                ExitCode::FAILURE
            }
        },
        None => {
            controller.await;
            ExitCode::SUCCESS
        }
    };
    if let Some(task) = endpoint_task {
        token.cancel();
        // The server answers its long-polls, closes its connections and
        // takes the leader label off within seconds.
        if tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .is_err()
        {
            tracing::warn!("the consumer endpoint did not stop in time");
        }
    }
    finish(token, server_task, code).await
}

/// Stops the HTTP server and returns `code`.
async fn finish(
    token: CancellationToken,
    server_task: tokio::task::JoinHandle<Result<(), crate::runtime::server::ServerError>>,
    code: ExitCode,
) -> anyhow::Result<ExitCode> {
    token.cancel();
    match tokio::time::timeout(Duration::from_secs(5), server_task).await {
        Ok(Ok(Err(error))) => tracing::warn!(%error, "metrics server stopped with an error"),
        Ok(Err(error)) => tracing::warn!(%error, "metrics server task failed"),
        Ok(Ok(Ok(()))) | Err(_) => {}
    }
    tracing::info!("stopped");
    Ok(code)
}
