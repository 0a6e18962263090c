//! The endpoint bench's baseline: a plain HTTPS server, hyper's HTTP/1 with
//! its default settings over tokio-rustls (the `ring` provider, a
//! self-signed certificate), that answers a view request whose epoch is 0
//! at once with a fixed view (at epoch 1) and holds any other, a long-poll,
//! until its client goes away. No authentication, no rate limits, no
//! timeouts: what the HTTP and TLS stack alone costs per request and per
//! open connection.
//!
//! Served inside the bench for the request rate ([`start`]), and as a
//! process of its own ([`PlainProcess`]: this bench binary run with
//! [`CHILD_ARG`]) for the RSS that open long-polls add, read as the
//! operator's is. The bench binary allocates as `shardring` does (jemalloc
//! with `.cargo/config.toml`'s settings), so the two processes' figures
//! compare.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use shardring_crds::endpoint::{QUERY_EPOCH, ViewResponse};

/// The argument that makes the bench binary the plain server (then the
/// directory to write its CA to); it prints its port on the first line.
pub const CHILD_ARG: &str = "--plain-https-server";

/// A plain server, ready: where it listens and the CA its certificate is
/// checked with.
pub struct Plain {
    pub addr: SocketAddr,
    pub ca: PathBuf,
}

/// Starts the plain server in this process (writing its CA into `dir`),
/// serving until the task is aborted.
pub async fn start(dir: &Path) -> (Plain, tokio::task::JoinHandle<()>) {
    let (acceptor, ca) = acceptor(dir);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = view_body();
    let server = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, body) = (acceptor.clone(), body.clone());
            tokio::spawn(serve_connection(acceptor, tcp, body));
        }
    });
    (Plain { addr, ca }, server)
}

/// Runs the plain server as this process's only work: prints its port on
/// stdout, then serves until killed.
pub async fn run_as_child(dir: &Path) -> ! {
    let (plain, server) = start(dir).await;
    println!("{}", plain.addr.port());
    let _ = server.await;
    std::process::exit(0)
}

/// The plain server in a process of its own, killed when dropped.
pub struct PlainProcess {
    child: Child,
    pub plain: Plain,
}

impl PlainProcess {
    /// Starts this bench binary as the plain server, writing its CA into
    /// `dir`, and waits until it listens.
    pub fn spawn(dir: &Path) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("the bench binary"))
            .arg(CHILD_ARG)
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the plain server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("its stdout"))
            .read_line(&mut line)
            .expect("the plain server's port");
        let port: u16 = line.trim().parse().expect("a port on the first line");
        Self {
            child,
            plain: Plain {
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                ca: ca_path(dir),
            },
        }
    }

    /// Its process id, for `/proc/<pid>/status`.
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for PlainProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ca_path(dir: &Path) -> PathBuf {
    dir.join("plain-ca.crt")
}

/// A TLS acceptor with a fresh self-signed certificate for 127.0.0.1, whose
/// CA it writes into `dir`.
fn acceptor(dir: &Path) -> (tokio_rustls::TlsAcceptor, PathBuf) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let ca = ca_path(dir);
    std::fs::write(&ca, certified.cert.pem()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![certified.cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into()),
    )
    .unwrap();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca)
}

/// The fixed answer: an empty view at epoch 1, so a client that follows it
/// next asks for a newer one, which is held.
fn view_body() -> Bytes {
    let mut view = ViewResponse {
        shard_group: "bench/g".into(),
        pod: "c-0".into(),
        ..ViewResponse::default()
    };
    view.view.epoch = 1;
    Bytes::from(serde_json::to_vec(&view).unwrap())
}

/// Serves HTTP/1.1 on one accepted connection, hyper's defaults.
async fn serve_connection(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    body: Bytes,
) {
    let Ok(tls) = acceptor.accept(tcp).await else {
        return;
    };
    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
        let body = body.clone();
        let at_once = request.uri().query().is_some_and(|q| {
            q.split('&').any(|kv| {
                kv.strip_prefix(QUERY_EPOCH)
                    .and_then(|v| v.strip_prefix('='))
                    == Some("0")
            })
        });
        async move {
            if !at_once {
                // A long-poll for a view newer than the only one there is.
                std::future::pending::<()>().await;
            }
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(body))
                    .unwrap(),
            )
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
        .await;
}
