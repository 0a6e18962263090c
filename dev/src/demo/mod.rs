//! `shardring-dev demo`: the whole system on one machine in about a minute, no
//! cluster needed. It starts kinesis-local and dynalite
//! ([`shardring_devkit::emulators`]), creates a stream and a KCL lease table, and runs
//! the operator's reconcile cycle ([`shardring_core::cycle()`]) against an
//! in-process cluster model ([`cluster`]) with the real Kinesis source and
//! lease reader. The consumer pods are real `shardring-reference-consumer`
//! processes ([`consumers`]) reading their downward-API files; a producer
//! ([`producer`]) writes throughout. The [`story`] scales up, rolls a
//! deploy and splits a shard, printing moves and per-pod tables; at the end
//! the consumer crate's checker proves the record logs ([`report`]). Then
//! the static act ([`partitioned`]): a static source without a lease table,
//! consumed through the operator's consumer endpoint (run in this process
//! without an API server) by the consumer crate's static-partition worker,
//! with release acknowledgements handing each partition's checkpoint over.

pub mod cluster;
pub mod consumers;
pub mod controller;
mod error;
pub mod partitioned;
pub mod producer;
pub mod queues;
pub mod report;
pub mod stage;
pub mod story;

use std::path::PathBuf;
use std::time::Duration;

pub use error::DemoError;
pub use report::Verdict;

/// Region every client uses (the emulators accept any).
pub const REGION: &str = "us-east-1";
/// The demo stream.
pub(crate) const STREAM: &str = "orders";
/// The demo lease table.
pub(crate) const LEASE_TABLE: &str = "orders-leases";
/// The demo ShardGroup.
pub(crate) const SHARD_GROUP: &str = "orders";

/// What the demo runs.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Multiplies every pause and timeout of the story (0.5 = twice as fast).
    pub duration_scale: f64,
    /// Keep the logs, views and document here (else a temp dir, removed).
    pub keep_logs: Option<PathBuf>,
    /// Pods at the start (the scale-up adds two).
    pub consumers: usize,
    /// Shards of the stream at the start (the split adds one).
    pub shards: u32,
    /// The reference consumer binary (default: found or built, see
    /// [`consumers::locate`]).
    pub consumer_binary: Option<PathBuf>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            duration_scale: 1.0,
            keep_logs: None,
            consumers: 3,
            shards: 6,
            consumer_binary: None,
        }
    }
}

impl DemoConfig {
    /// `base` scaled by `--duration-scale`, never below `floor`.
    pub fn scaled(&self, base: Duration, floor: Duration) -> Duration {
        base.mul_f64(self.duration_scale.max(0.01)).max(floor)
    }
}

/// Runs the demo until its verdict, or until Ctrl-C (everything it started
/// is stopped either way).
pub async fn run(config: DemoConfig) -> Result<Verdict, DemoError> {
    let (dir, remove_dir) = match &config.keep_logs {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!(
                "shardring-demo-{}-{}",
                std::process::id(),
                jiff::Timestamp::now().as_millisecond()
            )),
            true,
        ),
    };
    std::fs::create_dir_all(&dir)?;
    let result = tokio::select! {
        result = story::run(&config, &dir) => result,
        () = interrupted() => {
            // Dropping the story future drops the emulators, the consumer
            // processes and the producer: each kills what it started.
            Err(DemoError::Interrupted)
        }
    };
    // A failed story or verdict keeps its files for a look; a passed or
    // interrupted one removes its temp dir.
    let failed = match &result {
        Ok(verdict) => !verdict.passed(),
        Err(error) => !matches!(error, DemoError::Interrupted),
    };
    if !remove_dir || failed {
        println!(
            "record logs, pod views, consumer logs and the published document are in {}",
            dir.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// Resolves on Ctrl-C (SIGINT), SIGTERM or SIGHUP: any of them ends the demo
/// with its cleanup, so no emulator or consumer outlives it.
async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut streams = Vec::new();
        for kind in [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
        ] {
            match signal(kind) {
                Ok(stream) => streams.push(stream),
                Err(error) => tracing::warn!(%error, "cannot listen for a signal"),
            }
        }
        if streams.is_empty() {
            return std::future::pending().await;
        }
        let waits = streams.iter_mut().map(|s| Box::pin(s.recv()));
        futures::future::select_all(waits).await;
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
