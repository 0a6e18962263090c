//! The metrics/health HTTP server on a real loopback socket (port 0), driven
//! by a minimal raw-TCP HTTP/1.1 client: status codes, content types, bodies,
//! readiness transitions and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use shardring::runtime::health::Health;
use shardring::runtime::metrics;
use shardring::runtime::server::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    get_accepting(addr, path, "*/*").await
}

async fn get_accepting(addr: SocketAddr, path: &str, accept: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a complete response");
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

struct Running {
    addr: SocketAddr,
    health: Health,
    reconciles: Counter,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), shardring::runtime::server::ServerError>>,
}

async fn start() -> Running {
    let mut registry = metrics::new_registry();
    let reconciles = Counter::default();
    registry.register("reconciles", "Reconciles run", reconciles.clone());
    let registry: Arc<Registry> = Arc::new(registry);
    let health = Health::new();
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), registry, health.clone())
        .await
        .unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server.serve(shutdown.clone().cancelled_owned()));
    Running {
        addr,
        health,
        reconciles,
        shutdown,
        task,
    }
}

/// What Prometheus 2.x sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

#[tokio::test]
async fn serves_openmetrics_from_the_shared_registry_to_prometheus() {
    let running = start().await;
    running.reconciles.inc_by(3);
    let reply = get_accepting(running.addr, "/metrics", PROMETHEUS_ACCEPT).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(
        reply.body.contains("# TYPE shardring_reconciles counter"),
        "{}",
        reply.body
    );
    assert!(
        reply.body.contains("shardring_reconciles_total 3"),
        "{}",
        reply.body
    );
    assert!(
        reply
            .body
            .contains("shardring_process_resident_memory_bytes"),
        "{}",
        reply.body
    );
    assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);
}

#[tokio::test]
async fn serves_the_prometheus_text_format_to_anyone_else() {
    let running = start().await;
    running.reconciles.inc_by(3);
    let reply = get(running.addr, "/metrics").await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    for line in [
        "# HELP shardring_reconciles_total Reconciles run",
        "# TYPE shardring_reconciles_total counter",
        "shardring_reconciles_total 3",
    ] {
        assert!(reply.body.contains(line), "no {line:?} in {}", reply.body);
    }
    assert!(!reply.body.contains("# EOF"), "{}", reply.body);
    assert!(!reply.body.contains("# UNIT"), "{}", reply.body);
}

#[tokio::test]
async fn healthz_is_ok_and_readyz_waits_for_crds_and_caches() {
    let running = start().await;
    assert_eq!(get(running.addr, "/healthz").await.status, 200);

    let reply = get(running.addr, "/readyz").await;
    assert_eq!(reply.status, 503);
    assert!(reply.body.contains("CRDs"), "{}", reply.body);
    assert!(reply.body.contains("caches"), "{}", reply.body);

    running.health.set_crds_established();
    let reply = get(running.addr, "/readyz").await;
    assert_eq!(reply.status, 503);
    assert!(!reply.body.contains("CRDs"), "{}", reply.body);
    assert!(reply.body.contains("caches"), "{}", reply.body);

    running.health.set_caches_synced();
    let reply = get(running.addr, "/readyz").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(get(running.addr, "/healthz").await.status, 200);
}

#[tokio::test]
async fn unknown_paths_are_404() {
    let running = start().await;
    assert_eq!(get(running.addr, "/nope").await.status, 404);
}

#[tokio::test]
async fn stops_when_the_shutdown_token_is_cancelled() {
    let running = start().await;
    assert_eq!(get(running.addr, "/healthz").await.status, 200);
    running.shutdown.cancel();
    running.task.await.unwrap().unwrap();
    assert!(
        TcpStream::connect(running.addr).await.is_err(),
        "listener closed"
    );
}

#[tokio::test]
async fn a_taken_address_is_a_clear_error() {
    let running = start().await;
    let error = Server::bind(running.addr, Arc::new(Registry::default()), Health::new())
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains(&running.addr.to_string()),
        "{error}"
    );
}
