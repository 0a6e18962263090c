//! Why a lease table read failed ([`LeaseTableError`]), with the constant
//! reason of each failure.

/// Why a lease table read failed. Each variant has a constant reason used in
/// status conditions, Events and metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseTableError {
    /// The table does not exist.
    #[error("lease table not found: {0}")]
    TableNotFound(String),
    /// The operator's credentials may not scan the table.
    #[error("access denied to the lease table: {0}")]
    AccessDenied(String),
    /// DynamoDB throttled the scan after every retry.
    #[error("lease table scan throttled: {0}")]
    Throttled(String),
    /// Any other failure (network, 5xx, unexpected response).
    #[error("lease table error: {0}")]
    Other(String),
}

impl LeaseTableError {
    /// Constant condition/Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            LeaseTableError::TableNotFound(_) => "TableNotFound",
            LeaseTableError::AccessDenied(_) => "AccessDenied",
            LeaseTableError::Throttled(_) => "Throttled",
            LeaseTableError::Other(_) => "LeaseTableError",
        }
    }

    /// Label for the errors-by-reason metric.
    pub fn metric_label(&self) -> &'static str {
        self.reason()
    }
}
