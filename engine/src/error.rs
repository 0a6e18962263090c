//! Why a plan input is rejected. Every variant names the offending shard or
//! pod so that `shardring-dev plan` and the controller can say what to fix.

use thiserror::Error;

/// An input the engine refuses to plan.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    /// Two shards share an id.
    #[error("duplicate shard id {0:?}")]
    DuplicateShard(String),
    /// Two pods share a name.
    #[error("duplicate pod name {0:?}")]
    DuplicatePod(String),
    /// A shard id or pod name is empty.
    #[error("empty {0} (every shard needs an id and every pod a name)")]
    EmptyName(&'static str),
    /// A pod's capacity weight is zero.
    #[error("pod {0:?} has capacity 0 (capacity is a weight of at least 1)")]
    ZeroCapacity(String),
    /// A hash key range is not two decimal 128-bit numbers with start <= end.
    #[error("shard {shard:?} has a bad hashKeyRange: {reason}")]
    BadHashKeyRange {
        /// The shard.
        shard: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `bandPercent` is outside 1 to 100.
    #[error(
        "bandPercent {0} is outside 1 to 100 (the band is a percentage of each pod's fair share)"
    )]
    BadBand(u32),
    /// `loads` names a shard the input does not have.
    #[error(
        "loads names shard {0:?}, which is not among the shards (a load belongs to a shard of \
         this input: remove it, or add the shard)"
    )]
    UnknownLoad(String),
    /// More pods or shards than the engine's `u32` indices address.
    #[error("too many {0}: {1} (at most {2})")]
    TooMany(&'static str, usize, usize),
}

impl PlanError {
    /// A short constant label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            PlanError::DuplicateShard(_) => "duplicate_shard",
            PlanError::DuplicatePod(_) => "duplicate_pod",
            PlanError::EmptyName(_) => "empty_name",
            PlanError::ZeroCapacity(_) => "zero_capacity",
            PlanError::BadHashKeyRange { .. } => "bad_hash_key_range",
            PlanError::BadBand(_) => "bad_band",
            PlanError::UnknownLoad(_) => "unknown_load",
            PlanError::TooMany(..) => "too_many",
        }
    }
}
