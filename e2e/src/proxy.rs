//! A TCP relay that counts connections, put between the operator under test
//! and the API server: TLS passes through untouched (the client verifies
//! the API server's certificate as before), and every connection the
//! operator opens is counted. While the API server is down each request
//! needs a connection of its own (there is none to reuse), and the relay,
//! which cannot reach the API server either, closes it at once: the count
//! over the outage is the operator's request rate then.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long the relay waits for the API server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The running relay; stopped when dropped.
pub struct CountingProxy {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl CountingProxy {
    /// Relays every connection to `127.0.0.1:upstream_port` from a fresh
    /// loopback port.
    pub async fn start(upstream_port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicU64::new(0));
        let counted = connections.clone();
        let upstream = SocketAddr::from(([127, 0, 0, 1], upstream_port));
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let connected =
                        tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await;
                    if let Ok(Ok(mut server)) = connected {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Ok(Self {
            addr,
            connections,
            task,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
