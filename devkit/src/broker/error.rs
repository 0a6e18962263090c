//! Why a broker could not be started, stopped or administered
//! ([`BrokerError`]), with the variable that says where its start script is
//! ([`SERVER_ENV`]), which the error names.

/// Overrides where the broker's start script is.
pub const SERVER_ENV: &str = "SHARDRING_RABBITMQ_SERVER";

/// Why a broker could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// `rabbitmq-server` is not installed.
    #[error(
        "rabbitmq-server is not installed (apt-get install rabbitmq-server, or point {SERVER_ENV} at its start script)"
    )]
    NotInstalled,
    /// Files or processes of the broker.
    #[error("broker: {0}")]
    Io(#[from] std::io::Error),
    /// It did not come up or go down in time, or exited early.
    #[error("broker {node}: {detail}")]
    Process {
        /// Its node name.
        node: String,
        /// What went wrong, with its log's tail.
        detail: String,
    },
    /// A management API call failed.
    #[error("management API: {0}")]
    Admin(String),
}
