//! The endpoint tests' fixture: a mock API server answering TokenReviews
//! for test tokens, an [`EndpointServer`] on a loopback port with a mounted
//! certificate (or the self-signed fallback), the directory and releases
//! filled by the test as the controller would, and an HTTPS client that
//! trusts the endpoint's CA.
//!
//! Test tokens look like JWTs (`header.payload.signature`, payload in
//! base64url): the mock's reviewer reads the payload — namespace, pod, uid,
//! audiences, expiry, whether it is bound to a pod — and answers as
//! kube-apiserver would.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use shardring_core::GroupKey;
use shardring_crds::assignment::{AssignmentDocument, Handoff, PodView, ShardPhase, ShardRecord};
use shardring_crds::endpoint::ErrorBody;
use shardring_devkit::apiserver::{MockApiServer, MockOptions, TokenReviewer};
use shardring_endpoint::{
    EndpointMetrics, EndpointServer, EndpointServerConfig, EndpointState, PodSync,
};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

/// The namespace of the test ShardGroup and its pods.
pub(super) const NS: &str = "team";
/// The test ShardGroup.
pub(super) const GROUP: &str = "orders";
/// The audience the endpoint expects.
pub(super) const AUDIENCE: &str = "shardring.io";
/// Every test connection's source address.
pub(super) const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

pub(super) fn group() -> GroupKey {
    GroupKey::new(NS, GROUP)
}

pub(super) use shardring_devkit::apiserver::tokens::{Claims, now_secs};

/// A valid, bound token of `pod` (uid `uid-<pod>`) in [`NS`], for an hour.
pub(super) fn claims(pod: &str) -> Claims {
    Claims::bound(NS, pod, &format!("uid-{pod}"), AUDIENCE)
}

pub(super) fn token(pod: &str) -> String {
    claims(pod).token()
}

/// Answers TokenReviews of test tokens as kube-apiserver does.
pub(super) fn reviewer() -> TokenReviewer {
    shardring_devkit::apiserver::tokens::bound_token_reviewer()
}

/// A CA and a serving certificate it signed for localhost, in PEM.
pub(super) struct Pki {
    pub ca: String,
    ca_issuer: Issuer<'static, KeyPair>,
}

/// A serving certificate and its key, in PEM.
pub(super) struct Leaf {
    pub cert: String,
    pub key: String,
    pub der: CertificateDer<'static>,
}

impl Pki {
    pub(super) fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "endpoint test CA");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        Self {
            ca: cert.pem(),
            ca_issuer: Issuer::new(params, key),
        }
    }

    pub(super) fn leaf(&self) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.ca_issuer).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// Writes a Secret-style directory: `tls.crt`, `tls.key`, `ca.crt`.
    /// Each file is replaced by a rename, as atomically as the kubelet's
    /// symlink swap.
    pub(super) fn write(&self, dir: &Path, leaf: &Leaf) {
        std::fs::create_dir_all(dir).unwrap();
        for (name, content) in [
            ("ca.crt", &self.ca),
            ("tls.key", &leaf.key),
            ("tls.crt", &leaf.cert),
        ] {
            let tmp = dir.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, content).unwrap();
            std::fs::rename(&tmp, dir.join(name)).unwrap();
        }
    }
}

/// A fresh empty directory under the system's temp dir.
pub(super) fn tempdir(tag: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "shardring-endpoint-{tag}-{}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running endpoint and everything around it.
pub(super) struct Endpoint {
    pub mock: Arc<MockApiServer>,
    pub state: EndpointState,
    pub metrics: EndpointMetrics,
    pub addr: SocketAddr,
    /// The CA the client trusts (the endpoint's, as published in
    /// `state.ca`).
    pub ca: String,
    pub tls_dir: PathBuf,
    /// The leader flag, when the server follows one.
    pub leader: Option<watch::Sender<bool>>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// How to start an [`Endpoint`].
pub(super) struct Setup {
    /// Tweaks the default test configuration.
    pub config: Box<dyn FnOnce(&mut EndpointServerConfig)>,
    /// `Some(initial)`: follow a leader flag.
    pub leader: Option<bool>,
    /// Mount a certificate (else the self-signed fallback).
    pub mounted: bool,
    /// The mock to use (else a new one).
    pub mock: Option<Arc<MockApiServer>>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            config: Box::new(|_| {}),
            leader: None,
            mounted: true,
            mock: None,
        }
    }
}

pub(super) async fn mock() -> Arc<MockApiServer> {
    Arc::new(
        MockApiServer::start(MockOptions {
            token_reviewer: reviewer(),
            ..MockOptions::default()
        })
        .await,
    )
}

impl Endpoint {
    pub(super) async fn start() -> Self {
        Self::with(Setup::default()).await
    }

    pub(super) async fn with(setup: Setup) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mock = match setup.mock {
            Some(mock) => mock,
            None => mock().await,
        };
        let tls_dir = tempdir("tls");
        if setup.mounted {
            let pki = Pki::new();
            pki.write(&tls_dir, &pki.leaf());
        }
        let mut config =
            EndpointServerConfig::new("127.0.0.1:0".parse().unwrap(), "shardring-system");
        config.tls_dir = tls_dir.clone();
        config.tls_poll_interval = Duration::from_millis(100);
        (setup.config)(&mut config);
        let state = EndpointState::default();
        // The test group is served from its first sync, as once a first
        // request warmed it.
        state.directory.want(&group());
        let metrics = EndpointMetrics::default();
        let (leader, receiver) = match setup.leader {
            Some(initial) => {
                let (tx, rx) = watch::channel(initial);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let server = EndpointServer::bind(
            config,
            mock.client().await,
            state.clone(),
            metrics.clone(),
            receiver,
        )
        .await
        .expect("the endpoint binds");
        let addr = server.local_addr();
        let ca = state
            .ca
            .borrow()
            .as_deref()
            .expect("the endpoint publishes its CA")
            .to_owned();
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.serve(stop.clone()));
        Self {
            mock,
            state,
            metrics,
            addr,
            ca,
            tls_dir,
            leader,
            stop,
            task: Some(task),
        }
    }

    /// Stops the server and waits for it.
    pub(super) async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("the endpoint stops")
                .unwrap();
        }
    }

    /// Puts `pods` (name, epoch, active shards) into the group, at
    /// 127.0.0.1, with uid `uid-<name>`.
    pub(super) fn sync(&self, pods: &[(&str, u64, &[&str])]) -> usize {
        self.sync_at(pods, Some(LOOPBACK))
    }

    pub(super) fn sync_at(&self, pods: &[(&str, u64, &[&str])], ip: Option<IpAddr>) -> usize {
        let entries: Vec<(String, String, String)> = pods
            .iter()
            .map(|(name, epoch, active)| {
                let view = PodView {
                    epoch: *epoch,
                    active: active.iter().map(|s| (*s).to_owned()).collect(),
                    ..PodView::default()
                };
                (
                    (*name).to_owned(),
                    format!("uid-{name}"),
                    view.to_annotation(),
                )
            })
            .collect();
        let syncs = entries.iter().map(|(name, uid, annotation)| PodSync {
            name,
            uid,
            ip,
            annotation: Some(annotation),
        });
        self.state.directory.sync_group(&group(), None, syncs)
    }

    /// Publishes a document revoking `shard` from `pod` since `revoke_epoch`
    /// (the document at `epoch`) into the releases store.
    pub(super) fn revoke(&self, shard: &str, pod: &str, revoke_epoch: u64, epoch: u64) {
        let mut doc = AssignmentDocument::new(group().to_string(), epoch);
        doc.shards.insert(
            shard.to_owned(),
            ShardRecord {
                owner: Some(pod.to_owned()),
                state: ShardPhase::Revoking,
                handoff: Some(Box::new(Handoff {
                    to: Some("other".to_owned()),
                    since: jiff::Timestamp::now(),
                    epoch: revoke_epoch,
                    lease_counter: None,
                })),
                ..ShardRecord::default()
            },
        );
        self.state.releases.sync_group(&group(), Some(&doc));
    }

    pub(super) fn client(&self) -> Client {
        Client::new(self.addr, &self.ca)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.cancel();
        // The certificates stay for a test that failed, not after one that passed.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.tls_dir);
        }
    }
}

/// An HTTPS client of the endpoint.
#[derive(Clone)]
pub(super) struct Client {
    addr: SocketAddr,
    connector: TlsConnector,
}

/// One answer, read in full.
#[derive(Debug)]
pub(super) struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub(super) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub(super) fn error(&self) -> ErrorBody {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts the status, showing the body when it differs.
    #[track_caller]
    pub(super) fn expect(&self, status: u16) -> &Self {
        assert_eq!(
            self.status,
            status,
            "body: {}",
            String::from_utf8_lossy(&self.body)
        );
        self
    }
}

impl Client {
    pub(super) fn new(addr: SocketAddr, ca_pem: &str) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        Self {
            addr,
            connector: TlsConnector::from(Arc::new(config)),
        }
    }

    /// A TLS connection (not yet HTTP), and the leaf certificate the server
    /// presented.
    pub(super) async fn tls(
        &self,
    ) -> std::io::Result<(
        tokio_rustls::client::TlsStream<TcpStream>,
        CertificateDer<'static>,
    )> {
        let tcp = TcpStream::connect(self.addr).await?;
        let name = ServerName::try_from("localhost").unwrap();
        let tls = self.connector.connect(name, tcp).await?;
        let leaf = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .cloned()
            .expect("the server presents a certificate");
        Ok((tls, leaf))
    }

    /// A keep-alive HTTP/1 connection.
    pub(super) async fn connect(&self) -> std::io::Result<Conn> {
        let (tls, _) = self.tls().await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(std::io::Error::other)?;
        let task = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Conn { sender, task })
    }

    /// One request on a connection of its own.
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
    ) -> Answer {
        let mut conn = self.connect().await.expect("connect to the endpoint");
        conn.send(method, path, token, body)
            .await
            .expect("an answer")
    }

    pub(super) async fn get(&self, path: &str, token: Option<&str>) -> Answer {
        self.send(Method::GET, path, token, None).await
    }
}

/// A keep-alive connection.
pub(super) struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    task: JoinHandle<()>,
}

impl Conn {
    pub(super) async fn send(
        &mut self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<Answer, hyper::Error> {
        self.sender.ready().await?;
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request
            .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
            .unwrap();
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// Whether the server closed the connection.
    pub(super) fn is_closed(&self) -> bool {
        self.sender.is_closed() || self.task.is_finished()
    }
}

/// The view path of the test group.
pub(super) fn view_path(epoch: u64, wait: u64) -> String {
    format!(
        "{}?epoch={epoch}&waitSeconds={wait}",
        shardring_crds::endpoint::view_path(NS, GROUP)
    )
}

pub(super) fn releases_path() -> String {
    shardring_crds::endpoint::releases_path(NS, GROUP)
}

/// Polls `done` every 20 ms until it holds, failing after `timeout`.
pub(super) async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
