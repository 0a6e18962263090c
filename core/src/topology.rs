//! The shards a source reported ([`Topology`]) and why a read failed
//! ([`SourceError`], with constant reasons for conditions, Events and
//! metrics): the source read result the plan step sees. The sources
//! themselves (Kinesis, static) are the operator's; the static source's
//! topology is a pure function of its spec ([`Topology::of_static`]), so it
//! lives here too.

use shardring_crds::shard_group::StaticSource;
use shardring_engine::{Shard, ShardState};

/// The shards a source reported at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Every shard the source still lists (open and closed), in source order.
    pub shards: Vec<Shard>,
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

    /// The topology of a `static` source: the name template expanded `count`
    /// times, every partition an open shard without hash key range or
    /// parents, listed in id order (as the document lists them, so each plan
    /// checks the order instead of sorting). Such a source never fails to read.
    pub fn of_static(spec: &StaticSource) -> Self {
        let mut shards: Vec<Shard> = spec
            .partition_names()
            .map(|id| Shard {
                id,
                hash_key_range: None,
                parents: Vec::new(),
                state: ShardState::Open,
            })
            .collect();
        shards.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        Topology { shards }
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
    /// No AWS region: neither the spec nor the operator's environment names one.
    #[error("{0}")]
    NoRegion(String),
    /// The operator found no AWS credentials (default chain exhausted).
    #[error("no AWS credentials: {0}")]
    NoCredentials(String),
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
            SourceError::NoRegion(_) => "NoRegion",
            SourceError::NoCredentials(_) => "NoCredentials",
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
