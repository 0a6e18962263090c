//! A tiny fault-injecting HTTP/1.1 proxy on loopback for tests: each request
//! takes the next scripted fault (a canned throttle, server error or empty
//! shard list) or, when the script is empty, is forwarded to the upstream
//! emulator. One request per connection keeps it simple and exact.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A canned response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 400 LimitExceededException (Kinesis throttling).
    Throttle,
    /// 500 InternalFailure.
    ServerError,
    /// 200 with an empty shard list (a broken response).
    EmptyShards,
    /// 400 ResourceNotFoundException.
    NotFound,
}

/// What the proxy saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When the request arrived.
    pub at: Instant,
    /// Its X-Amz-Target header.
    pub target: String,
    /// Its body.
    pub body: String,
    /// The fault it got, or `None` when forwarded.
    pub fault: Option<Fault>,
}

/// A running proxy; aborted on drop.
pub struct FaultProxy {
    addr: SocketAddr,
    script: Arc<Mutex<VecDeque<Fault>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy in front of `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> Self {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("upstream address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let script = Arc::new(Mutex::new(VecDeque::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (task_script, task_seen) = (script.clone(), seen.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (script, seen) = (task_script.clone(), task_seen.clone());
                tokio::spawn(async move {
                    let _ = serve(client, upstream, script, seen).await;
                });
            }
        });
        Self {
            addr,
            script,
            seen,
            task,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues faults for the next requests.
    pub fn push(&self, faults: impl IntoIterator<Item = Fault>) {
        self.script.lock().extend(faults);
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_request(stream: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).to_string();
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    let mut body = buffer[header_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok((head, body))
}

/// Reads one response: by Content-Length, to the last chunk, or to EOF.
async fn read_response(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut header_end = None;
    loop {
        if header_end.is_none() {
            header_end = buffer
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|pos| pos + 4);
        }
        if let Some(end) = header_end {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head.lines().find_map(|line| {
                line.strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            });
            if let Some(length) = length {
                if buffer.len() >= end + length {
                    return Ok(buffer);
                }
            } else if head.contains("transfer-encoding: chunked") && buffer.ends_with(b"0\r\n\r\n")
            {
                return Ok(buffer);
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(buffer);
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The response with `Connection: close`, so the client never reuses a
/// connection this proxy is about to close.
fn close_after(response: &[u8]) -> Vec<u8> {
    let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return response.to_vec();
    };
    let head = String::from_utf8_lossy(&response[..end]);
    let mut out = String::new();
    for line in head.lines() {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&response[end + 4..]);
    bytes
}

fn canned(fault: Fault) -> Vec<u8> {
    let (status, kind, body) = match fault {
        Fault::Throttle => (
            "400 Bad Request",
            "LimitExceededException",
            r#"{"__type":"LimitExceededException","message":"Rate exceeded for stream"}"#,
        ),
        Fault::ServerError => (
            "500 Internal Server Error",
            "InternalFailure",
            r#"{"__type":"InternalFailure","message":"injected"}"#,
        ),
        Fault::EmptyShards => ("200 OK", "", r#"{"Shards":[]}"#),
        Fault::NotFound => (
            "400 Bad Request",
            "ResourceNotFoundException",
            r#"{"__type":"ResourceNotFoundException","message":"Stream not found"}"#,
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !kind.is_empty() {
        response.push_str(&format!("x-amzn-ErrorType: {kind}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(body);
    response.into_bytes()
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    script: Arc<Mutex<VecDeque<Fault>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> std::io::Result<()> {
    let (head, body) = read_request(&mut client).await?;
    let target = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("x-amz-target")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    let fault = script.lock().pop_front();
    seen.lock().push(Seen {
        at: Instant::now(),
        target,
        body: String::from_utf8_lossy(&body).to_string(),
        fault,
    });
    if let Some(fault) = fault {
        client.write_all(&canned(fault)).await?;
        return client.shutdown().await;
    }
    // Forward with `Connection: close` so the upstream ends the response by
    // closing, and relay it whole.
    let mut request = String::new();
    for line in head.trim_end().lines() {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            request.push_str(line);
            request.push_str("\r\n");
        }
    }
    request.push_str("Connection: close\r\n\r\n");
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(request.as_bytes()).await?;
    server.write_all(&body).await?;
    let response = read_response(&mut server).await?;
    client.write_all(&close_after(&response)).await?;
    client.shutdown().await
}
