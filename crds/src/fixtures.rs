//! Typed ShardGroups and ConsumerPools with fixed names, for the tests and
//! benchmarks of every crate and for the simulation's synthetic group
//! (behind the `fixtures` feature): a group over static partitions with
//! every setting at its default, the settings tests change most, and a pool
//! with or without a label selector. Callers adjust the spec or metadata
//! they care about on the returned value.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::consumer_pool::CapacitySpec;
use crate::shard_group::{
    HandoffSpec, LeaseTableSpec, PoolRef, RebalanceSpec, ShardSource, StaticSource,
};
use crate::{ConsumerPool, ConsumerPoolSpec, ShardGroup, ShardGroupSpec};

/// ShardGroup `name` in `namespace` (generation 1), consumed by pool
/// `pool`, over `count` static partitions named by `name_template` (e.g.
/// `orders-{index}`); every other setting at its default.
pub fn static_group(
    namespace: &str,
    name: &str,
    pool: &str,
    count: u32,
    name_template: &str,
) -> ShardGroup {
    let spec = ShardGroupSpec {
        pool_ref: PoolRef { name: pool.into() },
        source: ShardSource::Static(StaticSource {
            count,
            name_template: name_template.into(),
        }),
        lease_table: None,
        consumer_name: None,
        standbys: 0,
        balance: Default::default(),
        throughput: None,
        scaling: None,
        handoff: HandoffSpec::default(),
        rebalance: RebalanceSpec::default(),
        output: Default::default(),
    };
    let mut group = ShardGroup::new(name, spec);
    group.metadata.namespace = Some(namespace.into());
    group.metadata.generation = Some(1);
    group
}

/// A lease table `table_name` in the source's region, at AWS's endpoint.
pub fn lease_table(table_name: &str) -> LeaseTableSpec {
    LeaseTableSpec {
        table_name: table_name.into(),
        region: None,
        endpoint: None,
    }
}

/// Handoff with `drain_timeout` and `lease_failover` (durations such as `30s`).
pub fn handoff(drain_timeout: &str, lease_failover: &str) -> HandoffSpec {
    HandoffSpec {
        drain_timeout: drain_timeout.into(),
        lease_failover: lease_failover.into(),
    }
}

/// Balancing moves after `delay` (e.g. `0s`: at once), not rate-limited.
pub fn rebalance(delay: &str) -> RebalanceSpec {
    RebalanceSpec {
        delay: delay.into(),
        ..RebalanceSpec::default()
    }
}

/// ConsumerPool `name` in `namespace` selecting the pods with every label
/// of `match_labels` (none: an empty selector, which the API server would
/// reject but the controller core accepts), eligible `min_ready_seconds`
/// after they became Ready, every pod of weight 1 and no shard cap.
pub fn pool(
    namespace: &str,
    name: &str,
    match_labels: &[(&str, &str)],
    min_ready_seconds: u32,
) -> ConsumerPool {
    let labels: BTreeMap<String, String> = match_labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let mut pool = ConsumerPool::new(
        name,
        ConsumerPoolSpec {
            selector: LabelSelector {
                match_labels: (!labels.is_empty()).then_some(labels),
                match_expressions: None,
            },
            min_ready_seconds,
            capacity: CapacitySpec::default(),
            max_shards_per_pod: None,
            topology_keys: vec![],
            identity: None,
        },
    );
    pool.metadata.namespace = Some(namespace.into());
    pool
}
