//! One ShardGroup's source as the controller keeps it between reconciles
//! (in its [`GroupState`](super::groups::GroupState)): what it was built
//! from, the source once built, and its last good topology. The sources
//! ([`super::sources`]) build and read it.

use std::sync::Arc;

use shardring_core::group_state::TopologyMemory;

use crate::crds::shard_group::{LeaseTableSpec, ShardSource as SourceSpec};
use crate::source::TopologySource;

/// One group's source and what it last read.
pub(crate) struct GroupSource {
    /// What the source was built from.
    pub(crate) spec: (SourceSpec, Option<LeaseTableSpec>),
    /// `None` until a build succeeds: a failed build is retried at the next read.
    pub(super) source: Option<Arc<dyn TopologySource>>,
    /// The last good topology, fed each read.
    pub(super) memory: TopologyMemory,
}

impl GroupSource {
    /// Nothing built or read yet for `spec`.
    pub(super) fn new(spec: (SourceSpec, Option<LeaseTableSpec>)) -> Self {
        Self {
            spec,
            source: None,
            memory: TopologyMemory::default(),
        }
    }
}
