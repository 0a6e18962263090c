//! [`HarnessError`]: why a scenario step failed, the error of the harness
//! and of the helpers around it (consumer pods, namespaces, reshards,
//! verdicts), re-exported as `harness::HarnessError`.

use shardring_devkit::wait::WaitError;

use crate::operator::OperatorError;
use crate::published::PublishedError;

/// Why a scenario step failed.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An emulator could not be installed or started.
    #[error(transparent)]
    Emulator(#[from] shardring_devkit::emulators::EmulatorError),
    /// A Kinesis or DynamoDB call on the emulators failed.
    #[error("AWS emulator call failed: {0}")]
    Aws(String),
    /// A condition did not hold in time.
    #[error(transparent)]
    Wait(#[from] WaitError),
    /// The operator failed, stopped early or did not stop.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// A consumer process could not be found, started or stopped.
    #[error("consumer: {0}")]
    Consumer(String),
    /// Local files (record logs, consumer logs).
    #[error("harness files: {0}")]
    Io(#[from] std::io::Error),
    /// An object could not be built from JSON.
    #[error("building an object: {0}")]
    Json(#[from] serde_json::Error),
    /// The published ConfigMap could not be read.
    #[error(transparent)]
    Published(#[from] PublishedError),
    /// The RabbitMQ broker could not be set up or restarted.
    #[error("RabbitMQ broker: {0}")]
    Broker(String),
    /// A record log could not be parsed.
    #[error("record log {path}: {detail}")]
    Log {
        /// The log.
        path: String,
        /// What is wrong.
        detail: String,
    },
}
