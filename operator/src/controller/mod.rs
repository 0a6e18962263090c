//! The ShardGroup controller: each reconcile is the controller core's cycle
//! ([`shardring_core::cycle()`]: observe → plan → apply, the writes in the
//! contract's order, then what is served besides the API server) over the
//! Kubernetes cluster (`cluster`: observe from the reflector stores, the
//! sources and the endpoint, apply through [`apply`]'s requests, serve
//! through [`endpoint_sync`] and the document cache).
//! Each I/O step lives in its own module, and [`groups`] keeps everything
//! held per group between reconciles; [`context`] holds the shared
//! [`Context`] and wires it; [`reconcile`] holds the reconcile and
//! error-policy functions kube's `Controller` calls, and the finalizer that
//! cleans pod annotations up (and forgets the group) when a ShardGroup is
//! deleted; [`runner`] builds the watches and runs it all.

pub mod apply;
pub(crate) mod cached_pod;
mod cluster;
pub mod context;
pub mod endpoint_sync;
mod group_source;
pub mod groups;
pub mod metrics;
pub mod observe;
pub mod own_writes;
pub mod pod_cache;
mod pool_status;
pub mod pools;
pub mod reconcile;
pub mod runner;
pub mod scope;
pub mod snapshot;
pub mod sources;
pub mod sync;
pub mod triggers;
pub mod what_if;

pub use apply::ApplyError;
pub use cached_pod::CachedPod;
pub use context::{Context, ContextBuilder};
pub use groups::{GroupRegistry, GroupTable};
pub use metrics::ControllerMetrics;
pub use observe::Stores;
pub use pod_cache::{PodRecord, PodRecords};
pub use pools::Pools;
pub use reconcile::{Error, error_policy, reconcile};
pub use runner::{ControllerConfig, run_controller};
pub use scope::WatchScope;
pub use sources::Sources;
pub use sync::CacheSync;
