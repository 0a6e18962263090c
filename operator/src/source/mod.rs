//! Shard sources: where a ShardGroup's shards come from, one module per
//! kind (`kinesis`, `static_source`, `rabbitmq`), each saying everything about itself
//! through [`TopologySource`]: what it reads, how often, whether its shards
//! have lineage, whether it reads a lease table, and the constant reasons
//! of its failures ([`SourceError`]). A source never turns a failed read
//! into "no shards"; the controller keeps the last good topology when a
//! read fails. [`Providers`] builds the source of a spec (the one `match`
//! over the kinds), with whatever the operator instance shares between
//! groups (the Kinesis readers); the controller names no kind.

pub use shardring_core::topology::{SourceError, Topology};

pub mod kinesis;
mod providers;
pub mod rabbitmq;
pub mod refresh;
pub mod static_source;
mod topology_source;

pub use providers::{Providers, SourceSettings};
pub use static_source::StaticTopologySource;
pub(crate) use topology_source::ReadFuture;
pub use topology_source::TopologySource;
