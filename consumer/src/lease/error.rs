//! Why a lease operation failed ([`LeaseError`]), with its constant metric
//! label, from the DynamoDB errors of each call.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

/// Why a lease operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// A conditional write failed: someone else changed the lease first
    /// (another owner took it, or our counter is stale). The lease is not ours.
    #[error("lease {shard}: conditional write lost ({action})")]
    Conflict {
        /// The shard.
        shard: String,
        /// What was attempted.
        action: &'static str,
    },
    /// This worker does not hold the lease.
    #[error("lease {0} is not held by this worker")]
    NotHeld(String),
    /// The shard is not `active` for this pod at the newest epoch.
    #[error("shard {0} is not active for this pod at the newest epoch")]
    NotAssigned(String),
    /// DynamoDB failed (network, throttling, missing table, ...).
    #[error("lease {shard}: DynamoDB {action} failed: {detail}")]
    DynamoDb {
        /// The shard.
        shard: String,
        /// What was attempted.
        action: &'static str,
        /// The error with its code.
        detail: String,
    },
}

impl LeaseError {
    /// Constant label for logs and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Conflict { .. } => "Conflict",
            Self::NotHeld(_) => "NotHeld",
            Self::NotAssigned(_) => "NotAssigned",
            Self::DynamoDb { .. } => "DynamoDb",
        }
    }

    pub(super) fn from_sdk<E, R>(shard: &str, action: &'static str, error: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug,
    {
        if let Some(service) = error.as_service_error()
            && service.code() == Some("ConditionalCheckFailedException")
        {
            return Self::Conflict {
                shard: shard.to_owned(),
                action,
            };
        }
        let detail = match error.as_service_error() {
            Some(service) => format!(
                "{}: {}",
                service.code().unwrap_or("unknown"),
                service.message().unwrap_or("")
            ),
            None => format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(&error)),
        };
        Self::DynamoDb {
            shard: shard.to_owned(),
            action,
            detail,
        }
    }
}
