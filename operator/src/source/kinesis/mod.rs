//! The Kinesis shard source: a shared [`TopologyReader`] per stream (ListShards
//! only), an optional KCL [`LeaseTableReader`](crate::lease_table::LeaseTableReader), and the pure [`lifecycle`] that
//! turns both into engine shards. [`KinesisTopologySource`] implements
//! [`TopologySource`](super::TopologySource); [`KinesisTopologySource::observe`] gives the controller the
//! whole observation (lease snapshot, ordering flag, staleness).

pub mod errors;
pub mod lifecycle;
pub mod metrics;
pub mod pacing;
pub mod provider;
pub mod reader;
pub mod registry;
mod topology_source;

pub use lifecycle::{Lifecycle, LifecycleMemory};
pub use metrics::KinesisMetrics;
pub use provider::{AwsSettings, KinesisProvider};
pub use reader::{
    KinesisShard, ReaderOptions, StreamId, StreamTopology, TopologyReader, kinesis_client,
};
pub use registry::ReaderRegistry;
pub use topology_source::{KinesisObservation, KinesisTopologySource};
