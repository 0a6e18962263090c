//! shardring's API crate: the `ShardGroup` and `ConsumerPool` custom resources
//! (group `shardring.io`, version `v1alpha1`), the published assignment
//! document that consumer pods read, and the KCL lease-record contract
//! ([`lease_record`]) that consumers write and the operator reads. It makes
//! no client calls, so consumers and tools can depend on it without pulling
//! in a Kubernetes client.

// Every public item documents the API it describes (field docs become CRD
// descriptions shown by `kubectl explain`).
#![warn(missing_docs)]

pub mod assignment;
pub mod consumer_pool;
pub mod crd;
pub mod duration;
pub mod endpoint;
#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod lease_record;
pub mod shard_group;

pub use assignment::{
    AssignmentDocument, Handoff, HashKeyRange, PodAssignment, PodView, ReturnHold, ShardPhase,
    ShardRecord,
};
pub use consumer_pool::{ConsumerPool, ConsumerPoolSpec, ConsumerPoolStatus};
pub use crd::{crd_files, crd_yaml};
pub use duration::{DurationError, parse_duration};
pub use shard_group::{ShardGroup, ShardGroupSpec, ShardGroupStatus};

/// API group of every shardring resource.
pub const GROUP: &str = "shardring.io";
/// API version of every shardring resource in this crate.
pub const VERSION: &str = "v1alpha1";

/// Label on a ShardGroup naming the operator instance that serves it, as an
/// IngressClass does for Ingresses: an operator started with
/// `--controller-class NAME` serves only the groups labelled `NAME`; one
/// started without it serves only the groups without the label. Several
/// operators (a test suite's beside the installed one, or one per team) can
/// so share a cluster without ever acting on the same group.
pub const CONTROLLER_CLASS_LABEL: &str = "shardring.io/controller-class";

/// Finalizer that keeps a deleted ShardGroup until the operator has removed
/// its pod annotations.
pub const FINALIZER: &str = "shardring.io/cleanup";

/// The ShardGroup label selector of an operator of `class` (see
/// [`CONTROLLER_CLASS_LABEL`]).
pub fn controller_class_selector(class: Option<&str>) -> String {
    match class {
        Some(class) => format!("{CONTROLLER_CLASS_LABEL}={class}"),
        None => format!("!{CONTROLLER_CLASS_LABEL}"),
    }
}
