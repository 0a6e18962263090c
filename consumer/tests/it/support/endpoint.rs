//! A fake consumer endpoint for the endpoint tests: HTTPS on a free loopback
//! port with a fresh CA (rcgen), speaking the wire contract of
//! `shardring_crds::endpoint` the way the operator's server behaves (bearer
//! check with 401, long-polled views, release acknowledgements that are
//! `Accepted` then `Duplicate`, 409 `NotRevoking`/`FutureEpoch`), with
//! scripted answers (429, 503 `NotLeader` with `Connection: close`, a
//! response dropped after the release was recorded, rate-limit headers), a
//! "down" switch, and a log of every request with its time, connection
//! and bearer token.

use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use shardring_consumer::PodView;
use shardring_consumer::view::file::write_atomically;
use shardring_crds::endpoint::{
    ErrorBody, ReleaseOutcome, ReleaseRequest, ReleaseResponse, ViewResponse, releases_path,
    view_path,
};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// The ShardGroup every endpoint test serves.
pub const NAMESPACE: &str = "prod";
/// Its name.
pub const GROUP: &str = "orders";
/// The pod the fake serves.
pub const POD: &str = "pod-a";

/// An answer the fake gives instead of its normal one.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// An error answer.
    Error {
        /// Status code.
        status: u16,
        /// `ErrorBody.reason`.
        reason: &'static str,
        /// Extra headers.
        headers: Vec<(&'static str, String)>,
        /// Close the connection after it.
        close: bool,
    },
    /// The normal answer, with these extra headers.
    WithHeaders(Vec<(&'static str, String)>),
    /// Process the request normally (a release is recorded), then drop the
    /// connection without answering.
    Drop,
}

impl Scripted {
    /// 429 with `Retry-After: <seconds>`.
    pub fn rate_limited(seconds: u64) -> Self {
        Self::Error {
            status: 429,
            reason: "RateLimited",
            headers: vec![
                ("retry-after", seconds.to_string()),
                ("x-ratelimit-remaining", "0".into()),
                ("x-ratelimit-reset", seconds.to_string()),
            ],
            close: false,
        }
    }

    /// 503 `NotLeader` with `Retry-After: 0` and `Connection: close`.
    pub fn not_leader() -> Self {
        Self::Error {
            status: 503,
            reason: "NotLeader",
            headers: vec![("retry-after", "0".into())],
            close: true,
        }
    }
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When it arrived.
    pub at: Instant,
    /// `GET` or `POST`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// `?epoch=`.
    pub epoch: Option<u64>,
    /// `?waitSeconds=`.
    pub wait: Option<u64>,
    /// The bearer token.
    pub bearer: Option<String>,
    /// Which accepted connection it came on (1, 2, ...).
    pub connection: u64,
    /// A release's body.
    pub release: Option<ReleaseRequest>,
    /// The status answered (0: not yet, or dropped without an answer).
    pub status: u16,
}

#[derive(Default)]
struct Inner {
    token: String,
    log: Vec<Seen>,
    view_script: VecDeque<Scripted>,
    release_script: VecDeque<Scripted>,
    /// Releases recorded, by shard.
    released: BTreeMap<String, ReleaseRequest>,
}

struct State {
    view: watch::Sender<ViewResponse>,
    inner: Mutex<Inner>,
    connections: AtomicU64,
    down: AtomicBool,
}

impl State {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }
}

/// The running fake; stops when dropped.
pub struct FakeEndpoint {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// Its CA certificate (PEM).
    pub ca_pem: String,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for FakeEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A view of [`POD`] at `epoch`.
pub fn view(epoch: u64, active: &[&str], revoking: &[&str]) -> PodView {
    PodView {
        epoch,
        active: active.iter().map(|s| (*s).to_owned()).collect(),
        standby: Vec::new(),
        revoking: revoking.iter().map(|s| (*s).to_owned()).collect(),
        held: Vec::new(),
    }
}

impl FakeEndpoint {
    /// Starts serving `initial` to bearer `token`.
    pub async fn start(token: &str, initial: PodView) -> Self {
        let (ca_pem, server_config) = identity();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            view: watch::channel(response(initial, BTreeMap::new())).0,
            inner: Mutex::new(Inner {
                token: token.to_owned(),
                ..Inner::default()
            }),
            connections: AtomicU64::new(0),
            down: AtomicBool::new(false),
        });
        let acceptor = TlsAcceptor::from(server_config);
        let served = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                if served.down.load(Ordering::SeqCst) {
                    drop(tcp);
                    continue;
                }
                let connection = served.connections.fetch_add(1, Ordering::SeqCst) + 1;
                let (acceptor, state) = (acceptor.clone(), served.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |request| {
                        let state = state.clone();
                        async move { handle(&state, connection, request).await }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self {
            url,
            ca_pem,
            state,
            task,
        }
    }

    /// Serves `view` (with `checkpoints`) from now on; long-polls wake.
    pub fn publish(&self, view: PodView, checkpoints: &[(&str, &str)]) {
        let checkpoints = checkpoints
            .iter()
            .map(|(shard, checkpoint)| ((*shard).to_owned(), (*checkpoint).to_owned()))
            .collect();
        self.state.view.send_replace(response(view, checkpoints));
    }

    /// Accepts only `token` from now on.
    pub fn set_token(&self, token: &str) {
        token.clone_into(&mut self.state.inner().token);
    }

    /// Drops every new connection at once while `down`.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// Answers the next view request with `answer`.
    pub fn script_view(&self, answer: Scripted) {
        self.state.inner().view_script.push_back(answer);
    }

    /// Answers the next release request with `answer`.
    pub fn script_release(&self, answer: Scripted) {
        self.state.inner().release_script.push_back(answer);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.state.inner().log.clone()
    }

    /// The view requests so far.
    pub fn view_requests(&self) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|seen| seen.method == "GET")
            .collect()
    }

    /// The release requests so far.
    pub fn release_requests(&self) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|seen| seen.method == "POST")
            .collect()
    }

    /// Writes the token and CA files into `dir`: `(token, ca.crt)`.
    pub fn write_credentials(&self, dir: &Path, token: &str) -> (PathBuf, PathBuf) {
        let (token_file, ca_file) = (dir.join("token"), dir.join("ca.crt"));
        write_atomically(&token_file, token.as_bytes()).unwrap();
        write_atomically(&ca_file, self.ca_pem.as_bytes()).unwrap();
        (token_file, ca_file)
    }
}

fn response(view: PodView, checkpoints: BTreeMap<String, String>) -> ViewResponse {
    ViewResponse {
        shard_group: format!("{NAMESPACE}/{GROUP}"),
        pod: POD.to_owned(),
        view,
        checkpoints,
    }
}

type Answer = Result<Response<Full<Bytes>>, std::io::Error>;
type Reply = Response<Full<Bytes>>;

fn json(status: u16, body: &impl serde::Serialize, headers: &[(&str, String)]) -> Reply {
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        response = response.header(*name, value);
    }
    response
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap()
}

fn error(status: u16, reason: &str, headers: &[(&str, String)]) -> Reply {
    let body = ErrorBody {
        code: status,
        reason: reason.to_owned(),
        message: format!("fake endpoint: {reason}"),
    };
    json(status, &body, headers)
}

async fn handle(state: &State, connection: u64, request: Request<Incoming>) -> Answer {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let query: BTreeMap<String, String> = parts
        .uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let mut seen = Seen {
        at: Instant::now(),
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        epoch: query.get("epoch").and_then(|v| v.parse().ok()),
        wait: query.get("waitSeconds").and_then(|v| v.parse().ok()),
        bearer: parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned),
        connection,
        release: serde_json::from_slice(&body).ok(),
        status: 0,
    };
    // Logged on arrival (a long-poll is seen while it waits), its status
    // filled in once answered.
    let index = {
        let mut inner = state.inner();
        inner.log.push(seen.clone());
        inner.log.len() - 1
    };
    let answer = answer(state, &mut seen).await;
    state.inner().log[index].status = answer.as_ref().map_or(0, |r| r.status().as_u16());
    answer
}

async fn answer(state: &State, seen: &mut Seen) -> Answer {
    let is_view = seen.method == "GET" && seen.path == view_path(NAMESPACE, GROUP);
    let is_release = seen.method == "POST" && seen.path == releases_path(NAMESPACE, GROUP);
    if !is_view && !is_release {
        return Ok(error(404, "NotFound", &[]));
    }
    if seen.bearer.as_deref() != Some(state.inner().token.as_str()) {
        return Ok(error(
            401,
            "Unauthorized",
            &[("www-authenticate", "Bearer realm=\"shardring\"".into())],
        ));
    }
    let scripted = {
        let mut inner = state.inner();
        if is_view {
            inner.view_script.pop_front()
        } else {
            inner.release_script.pop_front()
        }
    };
    let mut extra = Vec::new();
    let mut drop_answer = false;
    match scripted {
        Some(Scripted::Error {
            status,
            reason,
            mut headers,
            close,
        }) => {
            if close {
                headers.push(("connection", "close".into()));
            }
            return Ok(error(status, reason, &headers));
        }
        Some(Scripted::WithHeaders(headers)) => extra = headers,
        Some(Scripted::Drop) => drop_answer = true,
        None => {}
    }
    let normal = if is_view {
        let epoch = seen.epoch.unwrap_or(0);
        let mut view = state.view.subscribe();
        if epoch > 0 {
            let wait = Duration::from_secs(seen.wait.unwrap_or(30));
            let _ = tokio::time::timeout(wait, view.wait_for(|v| v.view.epoch > epoch)).await;
        }
        let current = view.borrow().clone();
        json(200, &current, &extra)
    } else {
        release(state, seen.release.as_ref(), &extra)
    };
    if drop_answer {
        return Err(std::io::Error::other("scripted: answer dropped"));
    }
    Ok(normal)
}

fn release(state: &State, request: Option<&ReleaseRequest>, extra: &[(&str, String)]) -> Reply {
    let Some(request) = request else {
        return error(400, "BadRequest", extra);
    };
    let view = state.view.borrow().view.clone();
    if !view.revoking.contains(&request.shard) {
        return error(409, "NotRevoking", extra);
    }
    if request.epoch > view.epoch {
        return error(409, "FutureEpoch", extra);
    }
    let mut inner = state.inner();
    let duplicate = inner.released.contains_key(&request.shard);
    inner
        .released
        .insert(request.shard.clone(), request.clone());
    let (status, outcome) = if duplicate {
        (200, ReleaseOutcome::Duplicate)
    } else {
        (202, ReleaseOutcome::Accepted)
    };
    json(
        status,
        &ReleaseResponse {
            shard: request.shard.clone(),
            outcome,
        },
        extra,
    )
}

/// A fresh CA (PEM) and a server configuration for `127.0.0.1`/`localhost`
/// signed by it.
pub fn identity() -> (String, Arc<rustls::ServerConfig>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut ca_name = DistinguishedName::new();
    ca_name.push(DnType::CommonName, "fake shardring endpoint CA");
    ca_params.distinguished_name = ca_name;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca_cert.pem(), Arc::new(config))
}
