//! The `static` source: a fixed number of named partitions (`orders-{index}`),
//! for partition queues on RabbitMQ, SQS and similar systems. It has no hash
//! key ranges and no lineage: every partition is an open shard, and a read can
//! never fail, so its topology is simply the template expanded `count` times.

use shardring_core::topology::Topology;
use shardring_crds::shard_group::StaticSource as StaticSpec;

use super::{ReadFuture, TopologySource};

/// A [`TopologySource`] over a fixed set of partition names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticTopologySource {
    spec: StaticSpec,
}

impl StaticTopologySource {
    /// A source for the given `static` spec.
    pub fn new(spec: StaticSpec) -> Self {
        Self { spec }
    }

    /// The topology, computed without I/O ([`Topology::of_partitions`]).
    pub fn topology(&self) -> Topology {
        Topology::of_partitions(self.spec.partition_names())
    }
}

impl TopologySource for StaticTopologySource {
    fn describe(&self) -> String {
        format!("static:{}", self.spec.count)
    }

    fn read(&self) -> ReadFuture<'_> {
        let topology = self.topology();
        Box::pin(async move { Ok(topology) })
    }

    fn is_fixed(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ShardState;

    fn spec(count: u32, template: &str) -> StaticSpec {
        StaticSpec {
            count,
            name_template: template.into(),
        }
    }

    #[tokio::test]
    async fn expands_the_template_in_index_order() {
        let source = StaticTopologySource::new(spec(3, "orders-{index}"));
        let topology = source.read().await.unwrap();
        let ids: Vec<_> = topology.shards.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["orders-0", "orders-1", "orders-2"]);
        assert!(
            topology
                .shards
                .iter()
                .all(|s| s.state == ShardState::Open && s.parents.is_empty())
        );
        assert_eq!(source.describe(), "static:3");
    }

    #[test]
    fn template_may_repeat_the_index() {
        let topology = StaticTopologySource::new(spec(2, "q{index}-{index}")).topology();
        assert_eq!(topology.shards[1].id, "q1-1");
    }
}
