//! The shards a source reported ([`Topology`]) and why a read failed
//! ([`SourceError`], with constant reasons for conditions, Events and
//! metrics): the source read result the plan step sees. The sources
//! themselves are the operator's, each in its own module; the core names
//! none of them. A set of plain partitions (what a spec alone can name) is
//! a pure function of their names ([`Topology::of_partitions`]), so it
//! lives here too.

use std::sync::Arc;

use shardring_engine::{Shard, ShardState};

/// The shards a source reported at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Every shard the source still lists (open and closed), in source
    /// order; shared with the engine's input rather than copied into it.
    pub shards: Arc<Vec<Shard>>,
}

impl Topology {
    /// The shards in id order (the order of the document's records). A
    /// source that lists them sorted costs one pass to check.
    pub fn sorted_by_id(&self) -> Vec<&Shard> {
        let mut shards: Vec<&Shard> = self.shards.iter().collect();
        if !shards.is_sorted_by(|a, b| a.id <= b.id) {
            shards.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        }
        shards
    }

    /// The topology of plain partitions (a `static` source's names, or the
    /// queues a broker lists): every partition an open shard without hash
    /// key range or parents, listed in id order (as the document lists them,
    /// so each plan checks the order instead of sorting).
    pub fn of_partitions(names: impl IntoIterator<Item = String>) -> Self {
        let mut shards: Vec<Shard> = names
            .into_iter()
            .map(|id| Shard {
                id,
                hash_key_range: None,
                parents: Vec::new(),
                state: ShardState::Open,
            })
            .collect();
        shards.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        Topology {
            shards: shards.into(),
        }
    }
}

/// Why a source read failed. Each variant has a constant reason string used in
/// status conditions, Events and metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The stream (or queue set) does not exist.
    #[error("stream not found: {0}")]
    StreamNotFound(String),
    /// The operator's credentials may not read the source.
    #[error("access denied: {0}")]
    AccessDenied(String),
    /// The source throttled us; the read is retried with backoff.
    #[error("throttled: {0}")]
    Throttled(String),
    /// The source's configuration is invalid (waits for a spec change).
    #[error("invalid source: {0}")]
    Invalid(String),
    /// A failure the source names with a reason of its own (a constant of
    /// its module, e.g. a missing region, a broker that cannot be reached);
    /// retried like any transient failure.
    #[error("{message}")]
    Named {
        /// The constant condition and Event reason.
        reason: &'static str,
        /// What went wrong and what to do about it.
        message: String,
    },
    /// Any other failure (network, 5xx, unexpected response).
    #[error("source error: {0}")]
    Other(String),
}

impl SourceError {
    /// Constant condition/Event reason for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            SourceError::StreamNotFound(_) => "StreamNotFound",
            SourceError::AccessDenied(_) => "AccessDenied",
            SourceError::Throttled(_) => "Throttled",
            SourceError::Invalid(_) => "InvalidSource",
            SourceError::Named { reason, .. } => reason,
            SourceError::Other(_) => "SourceError",
        }
    }

    /// Label for the errors-by-reason metric.
    pub fn metric_label(&self) -> &'static str {
        self.reason()
    }

    /// Whether retrying can help (everything but an invalid spec).
    pub fn is_transient(&self) -> bool {
        !matches!(self, SourceError::Invalid(_))
    }
}
