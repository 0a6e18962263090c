//! The `ShardGroup` custom resource: what is consumed (a Kinesis stream, a
//! static set of partition queues, or the queues of a RabbitMQ virtual
//! host), by which `ConsumerPool`, and how shards are
//! balanced, handed over and published. The schema carries the CEL rules that
//! keep invalid specs out of the API server (see `tests/it/cel.rs`); the typed
//! accessors beside each type turn validated strings into values so the
//! controller never parses spec text itself.
//!
//! One file per part of the resource, all re-exported here:
//! - `spec`: the resource itself, its top-level spec, the pool
//!   reference, the balance mode and the output names;
//! - `source`: where the shards come from (one file per kind: Kinesis with
//!   its lease table, static, RabbitMQ);
//! - `movement`: how shards move (`handoff`) and how optional moves are paced
//!   (`rebalance`);
//! - `load`: load-aware balance (`throughput`) and the scaling signal
//!   (`scaling`);
//! - `status`: the observed state, with `move_log` (an entry of the move
//!   budget's log) and `lenient` (how its stored times are read);
//! - `error`: the error of a typed spec accessor;
//! - `rules`: the CEL rules the schema of several fields shares.

mod error;
mod lenient;
mod load;
mod move_log;
mod movement;
mod rules;
mod source;
mod spec;
mod status;
#[cfg(test)]
mod tests;

use rules::{DURATION, ENDPOINT_URL, POSITIVE_DURATION, REGION};

pub use error::SpecError;
pub use load::{ScalingSpec, ThroughputSpec};
pub use move_log::{MoveLogEntry, MoveLogEntryError};
pub use movement::{HandoffSpec, RebalanceSpec};
pub use source::{KinesisSource, LeaseTableSpec, RabbitMqSource, ShardSource, StaticSource};
pub use spec::{BalanceMode, OutputSpec, PoolRef, ShardGroup, ShardGroupSpec};
pub use status::{
    HandoffRecord, PodCounts, PoolBalanceStatus, RECENT_HANDOFFS, ShardCounts, ShardGroupStatus,
    ThroughputStatus,
};
