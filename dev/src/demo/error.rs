//! Why the demo could not run ([`DemoError`]), with its constant metric
//! label.

use std::time::Duration;

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// An emulator could not be installed or started.
    #[error(transparent)]
    Emulator(#[from] shardring_devkit::emulators::EmulatorError),
    /// The reference consumer could not be found, built or started.
    #[error("reference consumer: {0}")]
    Consumer(String),
    /// Creating the lease table or writing to the stream failed.
    #[error("AWS emulator call failed: {0}")]
    Aws(String),
    /// Creating or resharding the stream failed.
    #[error(transparent)]
    Reshard(#[from] shardring_devkit::stream::reshard::ReshardError),
    /// A condition the story waits for did not hold in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// Files could not be written.
    #[error("demo files: {0}")]
    Io(#[from] std::io::Error),
    /// A record log could not be read.
    #[error("record log {path}: {detail}")]
    Log {
        /// The log.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// Ctrl-C.
    #[error("interrupted")]
    Interrupted,
}

impl DemoError {
    /// Constant label for logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            DemoError::Emulator(e) => e.metric_label(),
            DemoError::Consumer(_) => "Consumer",
            DemoError::Aws(_) => "Aws",
            DemoError::Reshard(_) => "Reshard",
            DemoError::Timeout { .. } => "Timeout",
            DemoError::Io(_) => "Io",
            DemoError::Log { .. } => "Log",
            DemoError::Interrupted => "Interrupted",
        }
    }
}
