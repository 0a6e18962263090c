//! shardring's API crate: the `ShardGroup` and `ConsumerPool` custom resources
//! (group `shardring.io`, version `v1alpha1`) and the published assignment
//! document that consumer pods read. It makes no client calls, so consumers and
//! tools can depend on it without pulling in a Kubernetes client.

// Every public item documents the API it describes (field docs become CRD
// descriptions shown by `kubectl explain`).
#![warn(missing_docs)]

pub mod assignment;
pub mod consumer_pool;
pub mod crd;
pub mod duration;
pub mod shard_group;

pub use assignment::{
    AssignmentDocument, Handoff, HashKeyRange, PodAssignment, PodView, ShardPhase, ShardRecord,
};
pub use consumer_pool::{ConsumerPool, ConsumerPoolSpec, ConsumerPoolStatus};
pub use crd::{crd_files, crd_yaml};
pub use duration::{DurationError, parse_duration};
pub use shard_group::{ShardGroup, ShardGroupSpec, ShardGroupStatus};

/// API group of every shardring resource.
pub const GROUP: &str = "shardring.io";
/// API version of every shardring resource in this crate.
pub const VERSION: &str = "v1alpha1";
