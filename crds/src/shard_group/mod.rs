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
//! - `error`: the error of a typed spec accessor.

mod error;
mod lenient;
mod load;
mod move_log;
mod movement;
mod source;
mod spec;
mod status;
#[cfg(test)]
mod tests;

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

/// CEL: a positive Go-style duration (`30s`, `1m30s`, `250ms`).
const POSITIVE_DURATION: &str =
    "self.matches('^([0-9]+(ms|s|m|h))+$') && duration(self) > duration('0s')";
/// CEL: a Go-style duration that may be zero.
const DURATION: &str = "self.matches('^([0-9]+(ms|s|m|h))+$')";
/// CEL: an endpoint URL.
const ENDPOINT_URL: &str = "self.matches('^https?://[^\\\\s/]+(/.*)?$')";
/// CEL: an AWS region name.
const REGION: &str = "self.matches('^[a-z]{2}(-[a-z]+)+-[0-9]+$')";
