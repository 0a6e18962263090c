//! Where the shards come from: a tagged union of the source kinds, each in
//! a file of its own — a Kinesis stream (`kinesis`, with the KCL lease
//! table it may be read with), a static set of named partitions (`fixed`),
//! the queues of a RabbitMQ virtual host (`rabbitmq`). Exactly one is set,
//! by the schema (`oneOf`) and by a CEL rule whose message says what to fix;
//! the kind cannot change after creation.
//!
//! What the rest of the workspace asks of a source's spec goes through the
//! methods of [`ShardSource`], one exhaustive `match` each, so a new kind is
//! a new variant the compiler walks every caller through: its summary for
//! `kubectl get`, the interval it is read at, whether it has lineage
//! (parents and children), and the partitions the spec alone names.

mod fixed;
mod kinesis;
mod rabbitmq;
mod wire;

use std::time::Duration;

use schemars::JsonSchema;

pub use fixed::StaticSource;
pub use kinesis::{KinesisSource, LeaseTableSpec};
pub use rabbitmq::RabbitMqSource;

use super::SpecError;

/// The source of shards: exactly one of `kinesis`, `static` or `rabbitmq`. Read and
/// written as a map with one field per kind, in every serde format (see
/// `wire`); its schema is the union's (`oneOf`).
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.kinesis) ? 1 : 0) + (has(self.static) ? 1 : 0) + (has(self.rabbitmq) ? 1 : 0) == 1",
        "message": "set exactly one of source.kinesis, source.static or source.rabbitmq"
    },
    {
        "rule": "has(self.kinesis) == has(oldSelf.kinesis) && has(self.static) == has(oldSelf.static) && has(self.rabbitmq) == has(oldSelf.rabbitmq)",
        "message": "the source type (kinesis, static or rabbitmq) cannot be changed; create a new ShardGroup instead"
    }
]))]
pub enum ShardSource {
    /// An AWS Kinesis data stream.
    Kinesis(KinesisSource),
    /// A fixed number of named partitions (RabbitMQ queues, SQS queues, ...).
    #[serde(rename = "static")]
    Static(StaticSource),
    /// The queues of a RabbitMQ virtual host whose names match a pattern,
    /// listed through the management HTTP API.
    Rabbitmq(RabbitMqSource),
}

impl ShardSource {
    /// Short description for the `Source` printer column, e.g.
    /// `kinesis:orders`, `static:16` or `rabbitmq:orders\.[0-9]+`.
    pub fn summary(&self) -> String {
        match self {
            Self::Kinesis(kinesis) => kinesis.summary(),
            Self::Static(fixed) => fixed.summary(),
            Self::Rabbitmq(rabbitmq) => rabbitmq.summary(),
        }
    }

    /// How often the source is read again without a spec change, as the
    /// spec says (a source may jitter it); `Err` names a duration that does
    /// not parse (a spec stored before its CEL rule existed).
    pub fn refresh_interval(&self) -> Result<Duration, SpecError> {
        match self {
            Self::Kinesis(kinesis) => kinesis.refresh_interval(),
            Self::Static(_) => Ok(StaticSource::REFRESH),
            Self::Rabbitmq(rabbitmq) => rabbitmq.refresh_interval(),
        }
    }

    /// Whether shards of this kind have parents and children (a Kinesis
    /// split or merge): then the group says whether it can hold children
    /// back until their parents are complete (`OrderingNotEnforced`).
    pub fn has_lineage(&self) -> bool {
        match self {
            Self::Kinesis(_) => true,
            Self::Static(_) | Self::Rabbitmq(_) => false,
        }
    }

    /// The partitions the spec alone names, in index order (a `static`
    /// source); `None` for a source that must be read to know them.
    pub fn named_partitions(&self) -> Option<Vec<String>> {
        match self {
            Self::Static(fixed) => Some(fixed.partition_names().collect()),
            Self::Kinesis(_) | Self::Rabbitmq(_) => None,
        }
    }

    /// How many partitions the spec alone names ([`Self::named_partitions`]
    /// without building the names).
    pub fn named_partition_count(&self) -> Option<u32> {
        match self {
            Self::Static(fixed) => Some(fixed.count),
            Self::Kinesis(_) | Self::Rabbitmq(_) => None,
        }
    }
}
