//! The endpoint's HTTPS server: TLS setup (mounted certificate or the
//! self-signed fallback), the accept loop with its bound on connections, the
//! TLS handshake of each, whose HTTP/1.1 is [`http1`](super::http1)'s
//! (hyper's server), and the tasks that live as long as the server
//! (certificate reload, the leader label). Requests themselves are
//! [`routes`](super::routes)'.
//!
//! Only the leader serves: a follower answers 503 `NotLeader` and closes the
//! connection, so the client reconnects and the Service (selecting the
//! leader's label) sends it to the leader. At shutdown the server stops
//! serving first (open long-polls are answered 503 at once), then stops
//! accepting, and gives open connections a moment to finish.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::auth::{Authenticator, DEFAULT_CACHE_CAPACITY, LocalTokens, TokenCheck};
use super::http1::{self, Timeouts};
use super::leader_label::LeaderLabel;
use super::metrics::EndpointMetrics;
use super::ratelimit::FixedWindow;
use super::routes::App;
use super::selfsigned::{self, Origin, SelfSigned};
use super::serving::Serving;
use super::state::EndpointState;
use super::tls::{self, CertResolver, PemPair, TlsError};

/// How the endpoint is served (`shardring run`'s `--endpoint-*` flags).
#[derive(Debug, Clone)]
pub struct EndpointServerConfig {
    /// Listen address.
    pub addr: SocketAddr,
    /// Directory of the mounted certificate (`tls.crt`, `tls.key`, `ca.crt`).
    pub tls_dir: PathBuf,
    /// How often the certificate files are checked for a change.
    pub tls_poll_interval: Duration,
    /// Extra names of the self-signed fallback's certificate.
    pub dns_names: Vec<String>,
    /// Audience consumer tokens must be issued for.
    pub audience: String,
    /// Whether a caller's TCP peer address must be its pod's IP.
    pub peer_ip_check: bool,
    /// Longest time a TokenReview's positive answer is reused.
    pub token_cache_ttl: Duration,
    /// Requests per window from one source IP (checked before the token).
    pub ip_limit: u64,
    /// Requests per window from one pod.
    pub pod_limit: u64,
    /// Length of a rate-limit window.
    pub rate_window: Duration,
    /// Most open connections; past it new ones are closed at once.
    pub max_connections: usize,
    /// How long a request head (and a TLS handshake, and a body) may take.
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// The operator's namespace: where the self-signed fallback's Secret is.
    pub namespace: String,
    /// This replica's pod, which carries the leader label (`None`: no label).
    pub pod_name: Option<String>,
}

impl EndpointServerConfig {
    /// The defaults of `shardring run`, listening on `addr` in `namespace`.
    pub fn new(addr: SocketAddr, namespace: &str) -> Self {
        Self {
            addr,
            tls_dir: PathBuf::from("/etc/shardring/endpoint-tls"),
            tls_poll_interval: Duration::from_secs(5),
            dns_names: Vec::new(),
            audience: shardring_crds::endpoint::DEFAULT_AUDIENCE.to_owned(),
            peer_ip_check: true,
            token_cache_ttl: Duration::from_secs(60),
            ip_limit: 600,
            pod_limit: 120,
            rate_window: Duration::from_secs(10),
            max_connections: 10_000,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            namespace: namespace.to_owned(),
            pod_name: None,
        }
    }
}

/// Errors of the endpoint server.
#[derive(Debug, thiserror::Error)]
pub enum EndpointServerError {
    /// The listen address is taken or not permitted.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The requested address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The mounted certificate cannot be used.
    #[error("the endpoint certificate in {dir} is unusable: {source}")]
    Certificate {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        #[source]
        source: TlsError,
    },
    /// The self-signed fallback could not be generated.
    #[error("cannot generate the endpoint's self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
}

/// What the server reaches beyond its socket.
enum Backing {
    /// The API server: TokenReviews, the self-signed fallback's Secret,
    /// the leader label.
    Api(kube::Client),
    /// Nothing (the embedded mode): tokens it minted, a certificate in
    /// memory, no label.
    Local(Arc<LocalTokens>),
}

/// A bound, not yet serving, endpoint. Binding first lets the caller learn
/// the real port (tests bind port 0) and fail fast.
pub struct EndpointServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    acceptor: TlsAcceptor,
    resolver: Arc<CertResolver>,
    /// The pair in force if it came from the directory.
    mounted: Option<PemPair>,
    config: EndpointServerConfig,
    backing: Backing,
    state: EndpointState,
    metrics: EndpointMetrics,
    leader: Option<watch::Receiver<bool>>,
}

impl std::fmt::Debug for EndpointServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl EndpointServer {
    /// Sets up TLS (publishing the CA into `state.ca`) and binds
    /// `config.addr`. `leader` is the leader-election flag (`None`: this
    /// replica always leads).
    pub async fn bind(
        config: EndpointServerConfig,
        client: kube::Client,
        state: EndpointState,
        metrics: EndpointMetrics,
        leader: Option<watch::Receiver<bool>>,
    ) -> Result<Self, EndpointServerError> {
        Self::bind_with(config, Backing::Api(client), state, metrics, leader).await
    }

    /// Binds an endpoint that needs no API server, for the embedded mode
    /// (`shardring-dev demo`): tokens are checked against those `tokens`
    /// minted, the certificate is the self-signed fallback kept in memory
    /// (unless `config.tls_dir` holds one), no pod is labelled, and it
    /// always leads.
    pub async fn bind_local(
        config: EndpointServerConfig,
        tokens: Arc<LocalTokens>,
        state: EndpointState,
        metrics: EndpointMetrics,
    ) -> Result<Self, EndpointServerError> {
        Self::bind_with(config, Backing::Local(tokens), state, metrics, None).await
    }

    async fn bind_with(
        config: EndpointServerConfig,
        backing: Backing,
        state: EndpointState,
        metrics: EndpointMetrics,
        leader: Option<watch::Receiver<bool>>,
    ) -> Result<Self, EndpointServerError> {
        let provider = tls::provider();
        let dir = config.tls_dir.clone();
        let certificate = |source| EndpointServerError::Certificate {
            dir: dir.clone(),
            source,
        };
        let (key, mounted, ca) = match PemPair::read_dir(&dir).map_err(certificate)? {
            Some(pair) => {
                let key = pair.certified_key(&provider).map_err(certificate)?;
                tracing::info!(dir = %dir.display(), "endpoint certificate loaded");
                let ca = pair.ca_pem();
                if ca.is_none() {
                    tracing::info!(
                        "no ca.crt next to the endpoint certificate: consumers must get the CA elsewhere"
                    );
                }
                (key, Some(pair), ca)
            }
            None => {
                let names = selfsigned::subject_names(&config.namespace, &config.dns_names);
                let (pair, origin) = match &backing {
                    Backing::Api(client) => {
                        selfsigned::get_or_create(client.clone(), &config.namespace, &names).await?
                    }
                    Backing::Local(_) => (SelfSigned::generate(&names)?, Origin::InMemory),
                };
                let how = match origin {
                    Origin::Created => "created in",
                    Origin::Shared => "shared through",
                    Origin::InMemory => "in memory, not shared through",
                };
                tracing::warn!(
                    dir = %dir.display(),
                    secret = selfsigned::SECRET_NAME,
                    namespace = %config.namespace,
                    "no endpoint certificate mounted: serving a self-signed development \
                     certificate ({how} the Secret); mount a kubernetes.io/tls Secret for \
                     production"
                );
                let key = pair.pair().certified_key(&provider).map_err(certificate)?;
                (key, None, Some(Arc::from(pair.ca.as_str())))
            }
        };
        if let Some(ca) = ca {
            state.ca.send_replace(Some(ca));
        }
        let resolver = Arc::new(CertResolver::new(key));
        let tls_config = tls::server_config(resolver.clone()).map_err(certificate)?;
        let listener =
            TcpListener::bind(config.addr)
                .await
                .map_err(|source| EndpointServerError::Bind {
                    addr: config.addr,
                    source,
                })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| EndpointServerError::Bind {
                addr: config.addr,
                source,
            })?;
        Ok(Self {
            listener,
            local_addr,
            acceptor: TlsAcceptor::from(tls_config),
            resolver,
            mounted,
            config,
            backing,
            state,
            metrics,
            leader,
        })
    }

    /// The address actually bound (resolves port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `stop` is cancelled, then answers open long-polls,
    /// takes the leader label off and lets connections finish (a few
    /// seconds at most).
    pub async fn serve(self, stop: CancellationToken) {
        let Self {
            listener,
            local_addr,
            acceptor,
            resolver,
            mounted,
            config,
            backing,
            state,
            metrics,
            leader,
        } = self;
        let mut tasks = JoinSet::new();
        let serving = Serving::new(leader.clone(), stop.clone());
        let label_wanted = follow_leader(leader, stop.clone(), &mut tasks);
        tasks.spawn(tls::watch_dir(
            config.tls_dir.clone(),
            config.tls_poll_interval,
            mounted,
            resolver,
            state.ca.clone(),
            stop.clone(),
        ));
        match (&config.pod_name, &backing) {
            (Some(pod), Backing::Api(client)) => {
                let label = LeaderLabel::new(client.clone(), &config.namespace, pod);
                tasks.spawn(label.run(label_wanted, stop.clone()));
            }
            (None, Backing::Api(_)) => tracing::info!(
                "POD_NAME is not set: the leader does not label its pod for the endpoint Service"
            ),
            (_, Backing::Local(_)) => {}
        }
        let auth = match backing {
            Backing::Api(client) => TokenCheck::Review(Box::new(Authenticator::new(
                client,
                config.audience.clone(),
                config.token_cache_ttl,
                DEFAULT_CACHE_CAPACITY,
                metrics.clone(),
            ))),
            Backing::Local(tokens) => TokenCheck::Local(tokens),
        };
        let app = Arc::new(App {
            state,
            auth,
            ip_limit: FixedWindow::new(config.ip_limit, config.rate_window),
            pod_limit: FixedWindow::new(config.pod_limit, config.rate_window),
            serving,
            peer_ip_check: config.peer_ip_check,
            body_timeout: config.header_timeout,
            metrics: metrics.clone(),
        });
        tracing::info!(addr = %local_addr, "serving the consumer endpoint (HTTPS)");
        let open = Arc::new(AtomicUsize::new(0));
        let mut connections = JoinSet::new();
        let timeouts = Timeouts {
            header: config.header_timeout,
            idle: config.idle_timeout,
        };
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                accepted = listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, most likely: back off a
                    // little instead of spinning.
                    tracing::warn!(%error, "endpoint accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if open.load(Ordering::Relaxed) >= config.max_connections {
                // Closed at once, before any TLS work: the open connections
                // (long-polls) keep working.
                tracing::debug!(%peer, max = config.max_connections, "endpoint connection limit reached; closing");
                drop(stream);
                continue;
            }
            let guard = ConnectionGuard::new(open.clone(), metrics.clone());
            connections.spawn(connection(
                stream,
                peer,
                acceptor.clone(),
                app.clone(),
                timeouts,
                stop.clone(),
                guard,
            ));
        }
        drop(listener);
        let drained = tokio::time::timeout(Duration::from_secs(5), async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                open = connections.len(),
                "endpoint connections still open at shutdown; closing them"
            );
            connections.shutdown().await;
        }
        // The label's removal and the other tasks end on `stop`.
        if tokio::time::timeout(Duration::from_secs(10), async {
            while tasks.join_next().await.is_some() {}
        })
        .await
        .is_err()
        {
            tasks.shutdown().await;
        }
        tracing::info!("consumer endpoint stopped");
    }
}

/// Whether this replica's pod should carry the leader label: it leads
/// (always, without election) and is not shutting down. (Requests read
/// [`Serving`] instead, which has no task's lag.)
fn follow_leader(
    leader: Option<watch::Receiver<bool>>,
    stop: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> watch::Receiver<bool> {
    let initial = leader.as_ref().is_none_or(|l| *l.borrow());
    let (serving, receiver) = watch::channel(initial);
    tasks.spawn(async move {
        let mut leader = leader;
        loop {
            let leads = leader.as_mut().is_none_or(|l| *l.borrow_and_update());
            serving.send_if_modified(|s| std::mem::replace(s, leads) != leads);
            let changed = async {
                match leader.as_mut() {
                    Some(l) => l.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                alive = changed => if !alive {
                    // The election is gone: this replica cannot tell that it
                    // leads.
                    break;
                },
            }
        }
        serving.send_replace(false);
    });
    receiver
}

/// Counts an open connection while it lives.
struct ConnectionGuard {
    open: Arc<AtomicUsize>,
    metrics: EndpointMetrics,
}

impl ConnectionGuard {
    fn new(open: Arc<AtomicUsize>, metrics: EndpointMetrics) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        metrics.connections.inc();
        Self { open, metrics }
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.metrics.connections.dec();
    }
}

/// One connection: the TLS handshake, then HTTP/1 until the client closes,
/// a timeout expires, or the server stops.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    app: Arc<App>,
    timeouts: Timeouts,
    stop: CancellationToken,
    _guard: ConnectionGuard,
) {
    let _ = stream.set_nodelay(true);
    // The TLS stream's state goes on the heap, in a block that
    // ends before the HTTP server starts: a binding still in scope keeps its
    // room in the task's future across every later await, even once moved
    // from, and an open long-poll's memory is mostly that future.
    let io = {
        let tls = match tokio::time::timeout(timeouts.header, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => {
                tracing::debug!(%peer, %error, "endpoint TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "endpoint TLS handshake timed out");
                return;
            }
        };
        Box::new(tls)
    };
    // A stopping server answers what is in flight (long-polls end with
    // NotLeader) and closes each connection between requests.
    http1::serve(io, peer, app, timeouts, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An open long-poll's task is as large as its largest state: the TLS
    /// stream and hyper's connection stay on the heap or small, and the
    /// answer being prepared is boxed, so the task's own future stays
    /// within a few KiB.
    #[tokio::test]
    async fn a_connection_task_keeps_its_tls_stream_and_request_on_the_heap() {
        let metrics =
            EndpointMetrics::register(&mut prometheus_client::registry::Registry::default());
        let app = Arc::new(App {
            state: EndpointState::default(),
            // Either kind of token check: the routes box its future.
            auth: TokenCheck::Local(Arc::default()),
            ip_limit: FixedWindow::new(1, Duration::from_secs(1)),
            pod_limit: FixedWindow::new(1, Duration::from_secs(1)),
            serving: Serving::new(None, CancellationToken::new()),
            peer_ip_check: true,
            body_timeout: Duration::from_secs(1),
            metrics: metrics.clone(),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let stream = TcpStream::connect(listener.local_addr().expect("address"))
            .await
            .expect("connect");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(rustls::server::ResolvesServerCertUsingSni::new()));
        let timeouts = Timeouts {
            header: Duration::from_secs(1),
            idle: Duration::from_secs(1),
        };
        let guard = ConnectionGuard::new(Arc::default(), metrics);
        let task = connection(
            stream,
            "127.0.0.1:9".parse().expect("an address"),
            TlsAcceptor::from(Arc::new(tls)),
            app,
            timeouts,
            CancellationToken::new(),
            guard,
        );
        let tls_stream = size_of::<tokio_rustls::server::TlsStream<TcpStream>>();
        assert!(tls_stream > 1000, "the TLS stream is {tls_stream} bytes");
        eprintln!("a connection's task: {} bytes", size_of_val(&task));
        assert!(
            size_of_val(&task) < 3072,
            "a connection's task is {} bytes",
            size_of_val(&task)
        );
    }
}
