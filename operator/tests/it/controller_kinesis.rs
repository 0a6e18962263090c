//! Pure plan tests of Kinesis ShardGroups: the `OrderingNotEnforced`
//! condition, parent lineage in the published document without a lease
//! table, a stale topology after a failed read (never shrinking the
//! document), the source's jittered requeue, oversized pod views
//! (`PodViewTooLarge`) and `balance: hashRange` weights from the topology.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::SignedDuration;
use shardring::crds::shard_group::{BalanceMode, KinesisSource, LeaseTableSpec, ShardSource};
use shardring::crds::{ShardGroup, ShardPhase};
use shardring::engine::{HashKeyRange, Shard, ShardState};
use shardring::source::{SourceError, Topology};
use shardring_core::conditions::ORDERING_NOT_ENFORCED_MESSAGE;
use shardring_core::conditions::{self, DEGRADED, ORDERING_NOT_ENFORCED, READY};
use shardring_core::observation::Observation;
use shardring_core::plan;

use shardring_core::fixtures;
use shardring_core::fixtures::*;

/// A group reading stream `orders` (refresh 30 s), with or without a lease table.
fn kinesis_group(lease_table: bool) -> ShardGroup {
    let mut g = group(1);
    g.spec.source = ShardSource::Kinesis(
        serde_json::from_value::<KinesisSource>(serde_json::json!({
            "streamName": "orders", "region": "us-east-1", "refreshInterval": "30s"
        }))
        .unwrap(),
    );
    g.spec.lease_table = lease_table.then(|| LeaseTableSpec {
        table_name: "orders-app".into(),
        region: None,
        endpoint: None,
    });
    g
}

fn shard(id: &str, state: ShardState, parents: &[&str]) -> Shard {
    Shard {
        id: id.into(),
        hash_key_range: None,
        parents: parents.iter().map(|p| (*p).to_owned()).collect(),
        state,
    }
}

/// A split: closed parent `p`, open children `c1`, `c2`. Without a lease
/// table the engine shards carry no parents and the lineage is on the side,
/// as the Kinesis source reports it.
fn split_observation(lease_table: bool, pods: usize) -> Observation {
    let mut obs = observation(1, fixtures::pods(pods));
    obs.group = kinesis_group(lease_table);
    let parents: &[&str] = if lease_table { &["p"] } else { &[] };
    obs.topology.source = "kinesis:orders".into();
    obs.topology.last_good = Some(std::sync::Arc::new(Topology {
        shards: vec![
            shard("p", ShardState::Closed, &[]),
            shard("c1", ShardState::Open, parents),
            shard("c2", ShardState::Open, parents),
        ]
        .into(),
    }));
    obs.topology.ordering_enforced = Some(lease_table);
    obs.topology.lineage = BTreeMap::from([
        ("c1".to_owned(), vec!["p".to_owned()]),
        ("c2".to_owned(), vec!["p".to_owned()]),
    ]);
    obs.leases = shardring::controller::observe::LeaseObservation::unread(&obs.group);
    obs
}

#[test]
fn kinesis_without_a_lease_table_shows_ordering_not_enforced() {
    let decision = plan(&split_observation(false, 2));
    let c = conditions::find(&decision.status.conditions, ORDERING_NOT_ENFORCED)
        .expect("the condition is present");
    assert_eq!(c.status, "True");
    assert_eq!(c.reason, "NoLeaseTable");
    assert_eq!(c.message, ORDERING_NOT_ENFORCED_MESSAGE);
    assert!(c.message.contains("spec.leaseTable"));
    // A standing property, not a fault: Ready and Degraded are unaffected.
    let ready = conditions::find(&decision.status.conditions, READY).unwrap();
    assert_eq!(ready.status, "True");
    let degraded = conditions::find(&decision.status.conditions, DEGRADED).unwrap();
    assert_eq!(degraded.status, "False");
}

#[test]
fn a_lease_table_turns_ordering_not_enforced_false_and_static_groups_lack_it() {
    let decision = plan(&split_observation(true, 2));
    let c = conditions::find(&decision.status.conditions, ORDERING_NOT_ENFORCED).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "LeaseTableConfigured")
    );

    let static_decision = plan(&observation(4, pods(2)));
    assert!(conditions::find(&static_decision.status.conditions, ORDERING_NOT_ENFORCED).is_none());
    assert_eq!(static_decision.status.conditions.len(), 4);
}

#[test]
fn without_a_lease_table_children_are_placed_at_once_and_publish_their_parents() {
    let decision = plan(&split_observation(false, 2));
    let doc = decision.document_write.expect("first publish").document;
    for child in ["c1", "c2"] {
        let record = &doc.shards[child];
        assert_eq!(record.parents, vec!["p".to_owned()], "{child} lineage");
        assert_eq!(record.state, ShardPhase::Active, "{child} placed at once");
        assert!(record.owner.is_some());
    }
    assert!(doc.shards["p"].parents.is_empty());
}

#[test]
fn with_a_lease_table_children_wait_for_their_parent() {
    let decision = plan(&split_observation(true, 2));
    let doc = decision.document_write.expect("first publish").document;
    for child in ["c1", "c2"] {
        assert_eq!(doc.shards[child].state, ShardPhase::Pending);
        assert_eq!(doc.shards[child].parents, vec!["p".to_owned()]);
    }
}

#[test]
fn a_failed_read_plans_on_the_last_topology_says_how_old_and_keeps_the_document() {
    let mut obs = settle(split_observation(false, 2));
    let before = document(&obs).clone();
    let confirmed = now() - SignedDuration::from_secs(600);
    obs.topology.confirmed_at = Some(confirmed);
    obs.topology.error = Some(SourceError::Throttled("rate exceeded".into()));
    let decision = plan(&obs);
    assert!(decision.document_write.is_none(), "the document is kept");
    assert!(decision.annotation_writes.is_empty());
    let degraded = conditions::find(&decision.status.conditions, DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "Throttled")
    );
    assert!(
        degraded.message.contains("600s ago"),
        "{}",
        degraded.message
    );
    assert!(degraded.message.contains(&confirmed.to_string()));
    let ready = conditions::find(&decision.status.conditions, READY).unwrap();
    assert_eq!(ready.status, "True", "a stale topology keeps Ready");
    assert_eq!(decision.status.epoch, before.epoch);

    // Another error kind gives its own reason; nothing shrinks either.
    obs.topology.error = Some(SourceError::StreamNotFound("orders".into()));
    let decision = plan(&obs);
    let degraded = conditions::find(&decision.status.conditions, DEGRADED).unwrap();
    assert_eq!(degraded.reason, "StreamNotFound");
    assert!(decision.document_write.is_none());
}

#[test]
fn kinesis_groups_requeue_after_the_sources_jittered_refresh() {
    let mut obs = settle(split_observation(false, 2));
    obs.topology.refresh_after = Some(Duration::from_millis(31_700));
    assert_eq!(plan(&obs).requeue_after, Duration::from_millis(31_700));
    // Without the source's schedule, the spec's interval.
    obs.topology.refresh_after = None;
    assert_eq!(plan(&obs).requeue_after, Duration::from_secs(30));
    // Static groups keep their fixed schedule.
    let static_obs = settle(observation(4, pods(2)));
    assert_eq!(plan(&static_obs).requeue_after, Duration::from_secs(300));
}

#[test]
fn an_oversized_pod_view_is_not_written_and_the_other_pods_get_theirs() {
    // Capacity 20 vs 1: "big" gets ~10,500 of 11,000 long shard ids
    // (~240 KB of view), over the 128 KiB budget; "small" gets ~500.
    let mut obs = observation(1, vec![pod_info("big"), pod_info("small")]);
    obs.group = kinesis_group(false);
    let label = "shardring.io/capacity";
    obs.pool.as_mut().unwrap().spec.capacity.label = Some(label.into());
    obs.pods[0].labels.insert(label.into(), "20".into());
    obs.topology.ordering_enforced = Some(false);
    obs.topology.last_good = Some(std::sync::Arc::new(Topology {
        shards: (0..11_000)
            .map(|i| shard(&format!("shardId-{i:012}"), ShardState::Open, &[]))
            .collect::<Vec<_>>()
            .into(),
    }));
    let decision = plan(&obs);
    let doc = decision
        .document_write
        .as_ref()
        .map(|write| &write.document)
        .expect("the document is published");
    assert!(doc.pods["big"].active.len() > 6_000);
    let written: Vec<&str> = decision
        .annotation_writes
        .iter()
        .map(|w| w.pod.as_str())
        .collect();
    assert_eq!(written, vec!["small"]);
    let degraded = conditions::find(&decision.status.conditions, DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "PodViewTooLarge")
    );
    assert!(degraded.message.contains("big"), "{}", degraded.message);
    assert!(
        degraded.message.contains("read the ConfigMap"),
        "{}",
        degraded.message
    );
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.reason == "PodViewTooLarge")
    );

    // With a stale topology too, Degraded keeps the read error's reason and
    // still names the pods whose views are not written.
    obs.topology.error = Some(SourceError::AccessDenied("kinesis:ListShards".into()));
    let decision = plan(&obs);
    let written: Vec<&str> = decision
        .annotation_writes
        .iter()
        .map(|w| w.pod.as_str())
        .collect();
    assert_eq!(written, vec!["small"]);
    let degraded = conditions::find(&decision.status.conditions, DEGRADED).unwrap();
    assert_eq!(degraded.reason, "AccessDenied");
    assert!(
        degraded.message.contains("(big) is not written"),
        "{}",
        degraded.message
    );
}

#[test]
fn hash_range_groups_plan_with_key_space_weights() {
    // One shard holds half the key space, four share the other half: with
    // two pods, hashRange gives the big shard a pod to itself, where count
    // balance would put three shards on one pod whatever their size.
    let full = u128::MAX; // 2^128 - 1, the top of the Kinesis key space
    let half = 1u128 << 127;
    let quarter_of_half = half / 4;
    let mut shards = vec![Shard {
        id: "big".into(),
        hash_key_range: Some(HashKeyRange {
            start: "0".into(),
            end: (half - 1).to_string(),
        }),
        parents: vec![],
        state: ShardState::Open,
    }];
    for i in 0..4u128 {
        let start = half + i * quarter_of_half;
        let end = if i == 3 {
            full
        } else {
            start + quarter_of_half - 1
        };
        shards.push(Shard {
            id: format!("small-{i}"),
            hash_key_range: Some(HashKeyRange {
                start: start.to_string(),
                end: end.to_string(),
            }),
            parents: vec![],
            state: ShardState::Open,
        });
    }
    let mut obs = observation(1, pods(2));
    obs.group = kinesis_group(true);
    obs.group.spec.balance = BalanceMode::HashRange;
    obs.topology.ordering_enforced = Some(true);
    obs.topology.last_good = Some(std::sync::Arc::new(Topology {
        shards: shards.into(),
    }));
    let decision = plan(&obs);
    let doc = decision.document_write.expect("first publish").document;
    let big_owner = doc.shards["big"].owner.clone().expect("placed");
    assert_eq!(doc.pods[&big_owner].active, vec!["big".to_owned()]);
    let other = doc.pods.keys().find(|p| **p != big_owner).unwrap();
    assert_eq!(doc.pods[other].active.len(), 4);
    // The key ranges reach the document too.
    assert!(doc.shards["small-3"].hash_key_range.is_some());
}
