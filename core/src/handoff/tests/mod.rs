//! Evidence `pod_stopped` through the real plan step: each case the
//! kubelet's word proves (the handoff completes at once, long before any
//! drain timeout or lease expiry), and each it must not be trusted for
//! (nothing completes), with and without a lease table. This file holds the
//! fixtures (a settled group, a revoke, the lease table, the memory of
//! departed pods); the cases are in `pod_stopped.rs`.

mod drain_clocks;
mod pod_stopped;
mod release_acked;
mod without_annotations;

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::Evidence;
use crate::crds::ShardPhase;
use crate::crds::fixtures;
use crate::departures::{Departure, Departures};
use crate::leases::{LeaseSnapshot, LeaseTable};
use crate::observation::{Containers, LeaseObservation, PodInfo, Published};
use crate::observation::{Observation, TopologyObservation};
use crate::plan::{Decision, plan};
use crate::topology::Topology;

/// When pod `a` is deleted and its shards revoked.
fn t0() -> Timestamp {
    "2026-11-21T12:00:00Z".parse().unwrap()
}

fn secs(s: i64) -> SignedDuration {
    SignedDuration::from_secs(s)
}

fn pod(name: &str) -> PodInfo {
    PodInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        selected: true,
        ready: true,
        ready_since: Some(t0() - secs(3_600)),
        node_name: Some("node-1".into()),
        containers: Containers::Running,
        created: Some(t0() - secs(3_600)),
        generated_name: true,
        ..Default::default()
    }
}

/// Pods `a` and `b` holding two shards each, settled an hour before t0
/// (drain timeout 30 s, lease failover 10 s, lease table or not).
fn settled(lease_table: bool) -> Observation {
    let mut group = fixtures::static_group("prod", "orders", "consumers", 4, "orders-{index}");
    group.spec.lease_table = lease_table.then(|| fixtures::lease_table("orders-app"));
    group.spec.handoff = fixtures::handoff("30s", "10s");
    let pool = fixtures::pool("prod", "consumers", &[], 0);
    let topology = Topology::of_partitions(group.spec.source.named_partitions().unwrap());
    let mut obs = Observation {
        group,
        pool: Some(pool),
        pods: vec![pod("a"), pod("b")],
        topology: TopologyObservation {
            source: "static:4".into(),
            last_good: Some(std::sync::Arc::new(topology)),
            read_at: Some(t0() - secs(3_600)),
            ..Default::default()
        },
        published: Published::Missing,
        leases: LeaseObservation::unread_for(lease_table),
        departed: Departures::default(),
        releases: Default::default(),
        loads: Default::default(),
        now: t0() - secs(3_600),
        pool_share: Default::default(),
        stateful_sets: Default::default(),
    };
    obs = settle(obs);
    obs.leases = leases(&obs, lease_table);
    obs
}

impl LeaseObservation {
    fn unread_for(lease_table: bool) -> Self {
        if lease_table {
            LeaseObservation::Failed("not read".into())
        } else {
            LeaseObservation::NotConfigured
        }
    }
}

/// The lease table with every owner still holding and renewing its
/// leases (a process that let go would have released them): only the
/// kubelet's word can complete a handoff now.
fn leases(obs: &Observation, lease_table: bool) -> LeaseObservation {
    if !lease_table {
        return LeaseObservation::NotConfigured;
    }
    let doc = obs.published.document().expect("published");
    let leases = doc
        .shards
        .iter()
        .map(|(id, r)| {
            let snapshot = LeaseSnapshot {
                shard_id: id.clone(),
                owner: r.owner.clone(),
                counter: 7,
                counter_changed_at: obs.now,
                checkpoint: None,
                sequence_number: None,
                complete: false,
                parents: Vec::new(),
                children: Vec::new(),
                checkpoint_owner: None,
                throughput_kbps: None,
            };
            (id.clone(), snapshot)
        })
        .collect();
    LeaseObservation::Read(LeaseTable {
        leases,
        scanned_at: Some(obs.now),
        items: doc.shards.len(),
    })
}

fn settle(mut obs: Observation) -> Observation {
    let decision = plan(&obs);
    if let Some(doc) = decision.document_write.clone().map(|w| w.document) {
        obs.published = Published::from(doc);
    }
    for write in &decision.annotation_writes {
        if let Some(pod) = obs.pods.iter_mut().find(|p| p.name == write.pod) {
            pod.annotation = write.view.as_ref().map(|v| v.to_annotation());
        }
    }
    obs.group.status = Some(decision.status.into_status());
    obs
}

/// `a` gets its deletion timestamp at t0 (status still running): its two
/// shards are revoked at t0. Returns the observation one second later.
fn a_revoked(lease_table: bool) -> Observation {
    let mut obs = settled(lease_table);
    obs.now = t0();
    obs.pods[0].deletion_timestamp = Some(t0());
    obs.pods[0].deletion_grace_seconds = Some(30);
    let mut obs = settle(obs);
    let revoking = obs
        .published
        .document()
        .unwrap()
        .shards
        .values()
        .filter(|r| r.state == ShardPhase::Revoking)
        .count();
    assert_eq!(revoking, 2, "a's shards are revoked at t0");
    obs.now = t0() + secs(1);
    obs.leases = leases(&obs, lease_table);
    obs
}

/// `a` turns NotReady at t0 (no deletion seen): its two shards are
/// revoked at t0. Returns the observation one second later.
fn a_not_ready(lease_table: bool) -> Observation {
    let mut obs = settled(lease_table);
    obs.now = t0();
    obs.pods[0].ready = false;
    let mut obs = settle(obs);
    obs.now = t0() + secs(1);
    obs.leases = leases(&obs, lease_table);
    obs
}

fn evidence(decision: &Decision) -> Vec<Evidence> {
    decision.handoffs.iter().map(|h| h.evidence).collect()
}

fn departure(containers: Containers) -> Departure {
    Departure {
        uid: "uid-a".into(),
        at: t0() + secs(1),
        containers,
        scheduled: true,
        created: Some(t0() - secs(3_600)),
        generated_name: true,
    }
}

/// The memory of a watch running for a day that saw `departures` of `a`.
fn remembered(departures: Vec<Departure>) -> Departures {
    Departures {
        watched_since: Some(t0() - secs(86_400)),
        pods: BTreeMap::from([("a".to_owned(), departures)]),
        ..Default::default()
    }
}

/// Both modes: with a lease table (whose leases `a` still holds) and
/// without one (the drain timeout is 29 s away).
fn both(check: impl Fn(bool)) {
    check(true);
    check(false);
}
