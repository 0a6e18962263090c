//! A real Prometheus (Debian's `prometheus`) on loopback, for checking the
//! dashboard's queries: started with a scrape configuration of the given
//! targets and its own data directory, asked instant queries through its
//! HTTP API, and stopped (its directory removed) when dropped. It speaks to
//! Prometheus with a plain HTTP/1.0 request over a loopback socket: one
//! request per query, nothing that needs a client library.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// What went wrong with Prometheus.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    /// It could not be started, or its files written.
    #[error("starting {binary}: {source}")]
    Start {
        /// The binary.
        binary: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// It did not become ready.
    #[error("prometheus on {addr} was not ready after {waited:?} (its log: {log})")]
    NotReady {
        /// Its address.
        addr: SocketAddr,
        /// How long it was waited for.
        waited: Duration,
        /// Its log file.
        log: String,
    },
    /// A request failed on the wire.
    #[error("GET {path} from prometheus: {source}")]
    Request {
        /// The request path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// It refused a query (a parse error is `bad_data`).
    #[error("prometheus refused the query {query:?}: {answer}")]
    Refused {
        /// The query.
        query: String,
        /// Its answer.
        answer: String,
    },
}

/// A running Prometheus, stopped when dropped.
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

/// Percent-encodes `text` for a URL query value (RFC 3986 unreserved
/// characters stay as they are).
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The scrape configuration: every target in one job, scraped every
/// `interval`.
fn config(targets: &[SocketAddr], interval: Duration) -> String {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    format!(
        "global:\n  scrape_interval: {ms}ms\n  evaluation_interval: {ms}ms\n\
         scrape_configs:\n  - job_name: shardring\n    scrape_interval: {ms}ms\n    \
         static_configs:\n      - targets: [{}]\n",
        targets.join(", "),
        ms = interval.as_millis()
    )
}

impl Prometheus {
    /// Starts `binary` on a free loopback port scraping `targets` every
    /// `interval`, with its files under a fresh directory in `parent`, and
    /// waits until it answers `/-/ready`.
    pub fn start(
        binary: &Path,
        parent: &Path,
        targets: &[SocketAddr],
        interval: Duration,
    ) -> Result<Self, PrometheusError> {
        let start_error = |source| PrometheusError::Start {
            binary: binary.to_path_buf(),
            source,
        };
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(start_error)?;
        let dir = parent.join(format!("prometheus-{}", addr.port()));
        std::fs::create_dir_all(dir.join("data")).map_err(start_error)?;
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config(targets, interval)).map_err(start_error)?;
        let log = std::fs::File::create(dir.join("prometheus.log")).map_err(start_error)?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(start_error)?;
        let prometheus = Self { child, addr, dir };
        prometheus.wait_ready(Duration::from_secs(30))?;
        Ok(prometheus)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn wait_ready(&self, timeout: Duration) -> Result<(), PrometheusError> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            if self.get("/-/ready").is_ok_and(|(status, _)| status == 200) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(PrometheusError::NotReady {
            addr: self.addr,
            waited: timeout,
            log: std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default(),
        })
    }

    /// `GET path`: the status code and the body.
    fn get(&self, path: &str) -> Result<(u16, String), PrometheusError> {
        let request_error = |source| PrometheusError::Request {
            path: path.to_owned(),
            source,
        };
        let mut stream = TcpStream::connect(self.addr).map_err(request_error)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(request_error)?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr)
            .map_err(request_error)?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .map_err(request_error)?;
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        Ok((status, body.to_owned()))
    }

    /// The instant query `query` now: the `data.result` array of its answer
    /// (one element per series). A query Prometheus refuses (a parse
    /// error, an unknown function) is [`PrometheusError::Refused`].
    pub fn query(&self, query: &str) -> Result<Vec<Value>, PrometheusError> {
        let path = format!("/api/v1/query?query={}", percent_encode(query));
        let (status, body) = self.get(&path)?;
        let refused = |answer: String| PrometheusError::Refused {
            query: query.to_owned(),
            answer,
        };
        let answer: Value = serde_json::from_str(&body)
            .map_err(|e| refused(format!("HTTP {status}, not JSON ({e}): {body}")))?;
        if answer["status"] != "success" {
            return Err(refused(format!("HTTP {status}: {answer}")));
        }
        Ok(match &answer["data"]["result"] {
            Value::Array(series) => series.clone(),
            // A scalar or string answer is one value.
            Value::Null => Vec::new(),
            other => vec![other.clone()],
        })
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            percent_encode(r#"sum(x{a=~"b.*"}) > 0"#),
            "sum%28x%7Ba%3D~%22b.%2A%22%7D%29%20%3E%200"
        );
    }

    #[test]
    fn the_configuration_scrapes_every_target() {
        let targets = [
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ];
        let text = config(&targets, Duration::from_millis(500));
        assert!(text.contains("scrape_interval: 500ms"), "{text}");
        assert!(
            text.contains("targets: ['127.0.0.1:1', '127.0.0.1:2']"),
            "{text}"
        );
    }
}
