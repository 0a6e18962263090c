//! A stateful mock Kubernetes API server over HTTPS, for what the real
//! control plane (`../shared/k8s`) cannot do: inject faults (scripted
//! status codes such as 409, 410, 429 with `Retry-After` and 500; delays of
//! lists or of every request; watches closed early or fallen behind their
//! history into 410 Gone) and show exactly what a client sent and in which
//! order (the request log, TokenReviews counted). It serves what shardring's
//! operator, consumers and tests call, so that they run on it unchanged: the
//! local `shardring-mock-apiserver` of `scripts/image-check.sh`, the
//! endpoint's tests with forged service-account tokens, the mock e2e
//! scenarios.
//!
//! [`MockApiServer::start`] binds `127.0.0.1:0`, generates a CA and a leaf
//! certificate, and serves the kinds shardring uses: one global
//! resourceVersion, resourceVersion and uid preconditions on writes with
//! 409s, status subresources, merge and JSON patches, server-side apply
//! (as if forced: a field a manager stops applying goes), finalizers and
//! graceful pod deletion, namespaces that delete their contents, label and
//! field selectors in the forms shardring sends, lists (whole: `limit` is
//! not emulated) and watches with history replay, bookmarks and 410 Gone,
//! metadata-only lists and watches, TokenReviews. Clients reach it through a
//! kubeconfig ([`MockApiServer::kubeconfig_yaml`], [`MockApiServer::client`])
//! with a bearer token, as a user would.
//!
//! Not emulated, and checked on the real control plane instead
//! (`e2e/tests/it/api_semantics.rs`): managedFields and apply conflicts
//! (never raised), paging with continue tokens (a list answers whole, which
//! a client must accept from any server), delete preconditions and
//! set-based or other field selectors (a 400 that says the mock does not
//! serve them); neither are streaming lists (a 400 too), discovery lists (a
//! 404) nor API Priority and Fairness (script a 429 instead).
//!
//! Tests also read and write directly ([`MockApiServer::create`], …): those
//! writes produce the same resourceVersions and watch events as HTTP ones.

mod applied;
pub mod direct;
mod exchange;
mod faults;
mod handlers;
mod http;
mod meta;
mod options;
mod resources;
mod route;
mod selector;
mod status;
mod store;
mod tls;
pub mod tokens;
mod watch;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

pub use faults::RequestRecord;
pub use options::{MockOptions, TokenReviewer, unauthenticated_reviewer};

use exchange::Shared;
use faults::Faults;
use resources::Registry;
use store::{HistoryLimits, Store};

/// A running mock API server. Dropping it stops it: the accept loop, every
/// connection and every open watch end.
pub struct MockApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    ca_pem: String,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for MockApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockApiServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockApiServer {
    /// Starts a server on `127.0.0.1` at a free port.
    ///
    /// # Panics
    ///
    /// When the port cannot be bound (tests cannot go on without it).
    pub async fn start(options: MockOptions) -> MockApiServer {
        let identity = tls::generate();
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("bound address");
        let token = options
            .token
            .clone()
            .unwrap_or_else(|| format!("{:016x}{:016x}", meta::random_u64(), meta::random_u64()));
        let registry = Arc::new(Registry::new());
        let store = Store::new(
            registry,
            HistoryLimits {
                events: options.watch_history,
                bytes: options.watch_history_bytes,
            },
            options.broadcast_capacity,
        );
        let shared = Arc::new(Shared {
            store,
            faults: Arc::new(Faults::new(&options)),
            token,
            options,
            shutdown: CancellationToken::new(),
        });
        let server = MockApiServer {
            shared: shared.clone(),
            addr,
            ca_pem: identity.ca_pem,
            accept: tokio::spawn(http::serve(
                listener,
                TlsAcceptor::from(identity.server_config),
                shared,
            )),
        };
        for ns in ["default", "kube-system"] {
            server.create(serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns }
            }));
        }
        server
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The bearer token clients must send.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The CA certificate (PEM) that signed the server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A kubeconfig for this server: its URL and CA, a user with the token,
    /// and a current context in [`MockOptions::namespace`].
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: shardring-mock\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\n\
             users:\n\
             - name: shardring-mock\n  user:\n    token: {token}\n\
             contexts:\n\
             - name: shardring-mock\n  context:\n    cluster: shardring-mock\n    user: shardring-mock\n    namespace: {ns}\n\
             current-context: shardring-mock\n\
             preferences: {{}}\n",
            url = self.url(),
            ca = STANDARD.encode(&self.ca_pem),
            token = self.shared.token,
            ns = self.shared.options.namespace,
        )
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path` (for `KUBECONFIG` of a
    /// spawned process).
    ///
    /// # Errors
    ///
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// The `kube::Config` a user gets from this server's kubeconfig (tests
    /// may adjust it, e.g. turn off `default_retry`).
    ///
    /// # Panics
    ///
    /// When the kubeconfig does not parse (it always does).
    pub async fn kube_config(&self) -> kube::Config {
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml()).expect("valid kubeconfig");
        kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("kubeconfig loads")
    }

    /// A `kube::Client` built from this server's kubeconfig: HTTPS with the
    /// CA, the bearer token, the context's namespace.
    ///
    /// kube's rustls client configuration takes the process-wide
    /// CryptoProvider, and none is installed when two providers are
    /// compiled in (ring through kube, aws-lc-rs through the AWS SDK), so
    /// this installs ring's first; if one is installed already, that one
    /// stays.
    ///
    /// # Panics
    ///
    /// When the client cannot be built (it always can for this kubeconfig).
    pub async fn client(&self) -> kube::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        kube::Client::try_from(self.kube_config().await).expect("client from the kubeconfig")
    }

    /// Changes the delay before answering any request.
    pub fn set_request_delay(&self, delay: Duration) {
        self.shared.faults.set_knobs(|k| k.request_delay = delay);
    }

    /// Holds the answers to requests with method `method` (any when empty)
    /// whose path contains `path_contains` for `delay` after each took
    /// effect: the write is stored and its watch events go out at once,
    /// so watches see it before its writer hears back (as a busy API
    /// server often does). A later call for the same requests replaces the
    /// delay; `Duration::ZERO` ends it.
    pub fn delay_answers(&self, method: &str, path_contains: &str, delay: Duration) {
        let method = method.to_ascii_uppercase();
        self.shared.faults.set_knobs(|k| {
            k.answer_delays
                .retain(|(m, part, _)| !(*m == method && part == path_contains));
            if !delay.is_zero() {
                k.answer_delays
                    .push((method.clone(), path_contains.to_owned(), delay));
            }
        });
    }

    /// Answers the next `count` requests with method `method` (any when
    /// empty) whose path contains `path_contains` with `status_code` and a
    /// Status body.
    pub fn fail_next(&self, method: &str, path_contains: &str, status_code: u16, count: usize) {
        if count > 0 {
            self.shared
                .faults
                .fail_next(method, path_contains, status_code, count);
        }
    }

    /// The logged requests, oldest first (at most
    /// [`MockOptions::request_log_capacity`]).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.faults.requests()
    }

    /// Requests with `method` (any when empty) whose path contains
    /// `path_contains`, since the start.
    pub fn count(&self, method: &str, path_contains: &str) -> u64 {
        self.shared.faults.count(method, path_contains)
    }

    /// TokenReviews answered so far.
    pub fn token_review_count(&self) -> u64 {
        self.shared.faults.token_reviews()
    }
}

impl Drop for MockApiServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        self.accept.abort();
    }
}
