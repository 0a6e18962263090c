//! `shardring run` as the bench runs it: a child process with the server's
//! kubeconfig, without the node watch (the pods are never scheduled), its
//! consumer endpoint on an ephemeral loopback port, and its metrics on a
//! free loopback port the bench reads: readiness, and the write requests it
//! counted by kind.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

/// The operator process; killed when dropped.
pub struct Operator {
    child: Child,
    metrics: u16,
}

impl Drop for Operator {
    /// SIGTERM first, as Kubernetes stops it (a wrapper such as `perf
    /// record` then writes its data), SIGKILL after ten seconds.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Operator {
    /// `shardring run` against the cluster of `kubeconfig`, watching
    /// `namespace` (all when `None`), in `home` (its own namespace: the
    /// endpoint's self-signed Secret goes there). `extra` arguments go last.
    ///
    /// `SHARDRING_BENCH_LOG=<file>`: the operator's debug log (each
    /// reconcile's phase timings) goes there; `SHARDRING_BENCH_LOG_FILTER`
    /// replaces its filter (e.g. add `kube_runtime::controller=debug` to see
    /// what woke each reconcile).
    pub fn spawn(kubeconfig: &Path, namespace: Option<&str>, home: &str, extra: &[String]) -> Self {
        let metrics = free_port();
        let mut command = common::operator_command();
        command.args([
            "run",
            "--no-node-watch",
            "--metrics-addr",
            &format!("127.0.0.1:{metrics}"),
            "--endpoint-addr",
            "127.0.0.1:0",
        ]);
        if let Some(namespace) = namespace {
            command.args(["--namespace", namespace]);
        }
        command.args(extra);
        let log_filter = std::env::var("SHARDRING_BENCH_LOG_FILTER")
            .unwrap_or_else(|_| "warn,shardring::controller=debug".into());
        let (filter, stdout) = match std::env::var_os("SHARDRING_BENCH_LOG") {
            Some(path) => (
                log_filter.as_str(),
                Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .expect("open the log file"),
                ),
            ),
            None => ("warn", Stdio::null()),
        };
        let child = command
            .args(["--log-filter", filter])
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAMESPACE", home)
            .stdin(Stdio::null())
            .stdout(stdout)
            .spawn()
            .expect("spawn shardring run");
        Self { child, metrics }
    }

    /// Waits until `/readyz` answers 200 (CRDs Established, caches synced).
    pub async fn ready(&self, deadline: Duration) {
        let started = Instant::now();
        while !self
            .get("/readyz")
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
        {
            assert!(
                started.elapsed() < deadline,
                "the operator not ready after {deadline:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its peak resident set (VmHWM) so far, in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        common::status_mib(&self.child.id().to_string(), "VmHWM:")
    }

    /// The write requests it has counted (`shardring_publish_writes_total`,
    /// every kind).
    pub fn writes(&self) -> u64 {
        let Some(text) = self.get("/metrics") else {
            return 0;
        };
        text.lines()
            .filter(|l| l.starts_with("shardring_publish_writes_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// A plain HTTP/1.0 GET of the metrics server (its whole answer).
    fn get(&self, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.metrics)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        Some(answer)
    }
}

/// A loopback port free right now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("its address").port()
}
