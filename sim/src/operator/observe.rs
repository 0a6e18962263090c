//! The observe half of the simulated operator's cycle: the [`Observation`]
//! built from the simulated API objects (the pods as the API shows them, the
//! published document and status), the topology (failed and stale reads)
//! and the lease table (failed scans, counter change times as this operator
//! saw them), and the departed pods its watch remembers.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::clock::ts;
use super::group::{Group, NAMESPACE};
use super::process::Operator;
use super::reconcile::Reconcile;
use crate::engine::{Shard, ShardState};
use crate::rng::Rng;
use crate::world::{Checkpoint, Ms, SimPod, World};
use shardring_core::cycle::{Observe, Observed};
use shardring_core::departures::Departure;
use shardring_core::group_state::{PodRecord, TopologyRead, collect_pods};
use shardring_core::leases::{LeaseSnapshot, LeaseTable};
use shardring_core::observation::{LeaseObservation, Observation, PodInfo, Published, ReleaseAcks};
use shardring_core::topology::{SourceError, Topology};

impl Observe for Reconcile<'_> {
    /// The operator's plan memory, as the real one keeps per group.
    fn plan_memory(&mut self) -> Option<&mut shardring_core::PlanMemory> {
        Some(&mut self.op.groups[self.g].plan_memory)
    }

    /// The observation at the world's time (`now` is that time), with the
    /// published version the document write is conditioned on and, in pool
    /// mode, the group's share of the pool's balance; it also keeps what
    /// the checks of the decision need (whether a read failed, the shards
    /// of the document read).
    async fn observe(&mut self, now: Timestamp) -> Observed {
        debug_assert_eq!(now, ts(self.world.now), "the simulation's clock");
        let g = self.g;
        let published = self.op.groups[g].doc_base();
        let mut observation = self.op.observe(g, self.world, self.rng);
        // The document as the operator's memory of it reads it (a plan at
        // rest reads the ConfigMap and leaves that memory alone).
        observation.published = self.op.groups[g].read_document();
        if self.op.pooled() {
            self.op
                .deal_into(g, &mut observation, self.world.now, self.rng);
        }
        self.read_error = observation.topology.error.is_some()
            || matches!(observation.leases, LeaseObservation::Failed(_));
        self.before = self.op.groups[g]
            .doc
            .as_ref()
            .map(|d| d.shards.keys().cloned().collect())
            .unwrap_or_default();
        Observed {
            observation,
            published,
        }
    }
}

impl Operator {
    /// Group `g`'s topology as its source and lease table are now.
    pub fn true_topology(world: &World, g: usize) -> Topology {
        let shards = world
            .stream
            .iter()
            .filter(|s| s.group == g)
            .map(|s| Shard {
                id: s.id.clone(),
                hash_key_range: None,
                parents: s.parents.clone(),
                state: if world.sources[g].lease_table && world.complete(&s.id) {
                    ShardState::Complete
                } else if s.open {
                    ShardState::Open
                } else {
                    ShardState::Closed
                },
            })
            .collect::<Vec<_>>()
            .into();
        Topology { shards }
    }

    /// The observation of a reconcile of group `g` (with read faults),
    /// planned alone.
    pub fn observe(&mut self, g: usize, world: &World, rng: &mut Rng) -> Observation {
        let now = world.now;
        let truth = Self::true_topology(world, g);
        let (faults, fired) = (self.faults, &mut self.fired);
        let group = &mut self.groups[g];
        // The read, as an event of the operator's own memory of the last
        // good topology (the core's, which the operator feeds the same way).
        let read = if rng.chance(faults.topology_fail) {
            fired.topology_failed += 1;
            group.fault(now);
            Some(TopologyRead::Failed(SourceError::Throttled(
                "simulated".into(),
            )))
        } else if group.topology.is_known() && rng.chance(faults.topology_stale) {
            // A cached read: the source serves what it read before, so
            // nothing new reaches the memory (it never goes back before
            // what this operator already saw).
            fired.topology_stale += 1;
            group.fault(now);
            None
        } else {
            Some(TopologyRead::Read(truth))
        };
        let error = read.and_then(|read| group.topology.apply(read, ts(now)));
        let topology = group.topology.observation("sim".into(), error);
        let leases = if !world.sources[g].lease_table {
            LeaseObservation::NotConfigured
        } else if rng.chance(faults.lease_fail) {
            fired.lease_failed += 1;
            group.fault(now);
            LeaseObservation::Failed("simulated".into())
        } else {
            let table = scan(group, g, world);
            group.lease_prev = Some(table.clone());
            LeaseObservation::Read(table)
        };
        let mut shard_group = group.shard_group.clone();
        shard_group.status = group.status.clone();
        Observation {
            group: shard_group,
            pool: Some(self.pool.clone()),
            pods: pod_infos(world, g, &group.shard_group.annotation_key()),
            topology,
            published: group
                .doc
                .clone()
                .map_or(Published::Missing, Published::from),
            leases,
            departed: self.departed.departures(NAMESPACE, |_| true, ts(now)),
            releases: ReleaseAcks {
                acks: group.releases.clone(),
            },
            loads: group.loads.observe(),
            now: ts(now),
            pool_share: Default::default(),
            stateful_sets: stateful_sets(world),
        }
    }
}

/// A consistent scan of group `g`'s lease table, with counter change times
/// as this operator saw them.
fn scan(group: &Group, g: usize, world: &World) -> LeaseTable {
    let now = ts(world.now);
    let leases = world
        .leases
        .iter()
        .filter(|(id, _)| world.group_of(id) == Some(g))
        .map(|(id, row)| {
            let before = group
                .lease_prev
                .as_ref()
                .and_then(|t| t.get(id))
                .filter(|b| b.counter == row.counter && b.owner == row.owner);
            let snap = LeaseSnapshot {
                shard_id: id.clone(),
                owner: row.owner.clone(),
                counter: row.counter,
                counter_changed_at: before.map_or(now, |b| b.counter_changed_at),
                checkpoint: None,
                sequence_number: None,
                complete: row.checkpoint == Checkpoint::End,
                parents: Vec::new(),
                children: Vec::new(),
                checkpoint_owner: None,
                throughput_kbps: None,
            };
            (id.clone(), snap)
        })
        .collect::<BTreeMap<_, _>>();
    let items = leases.len();
    LeaseTable {
        leases,
        scanned_at: Some(now),
        items,
    }
}

/// The StatefulSet whose pods the world's fixed-name pods are (`pod-07`).
const STATEFUL_SET: &str = "pod";

/// The StatefulSets as the API shows them: with fixed-name pods, set `pod`
/// with room for every ordinal (whether a removed pod comes back is the
/// world's choice: one that is not recreated is a pod that does not return).
fn stateful_sets(world: &World) -> shardring_core::identity::StatefulSets {
    if world.pods.iter().any(|p| !p.generated_name) {
        BTreeMap::from([(STATEFUL_SET.to_owned(), u32::MAX)])
    } else {
        Default::default()
    }
}

/// Pod `pod` as the operator's pod cache records it, with `annotations`
/// (the simulated pods carry no labels: the pool selects every one).
fn record_of(pod: &SimPod, annotations: Vec<(String, String)>) -> PodRecord {
    PodRecord {
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        annotations,
        created: Some(ts(pod.created)),
        deletion_timestamp: pod.deletion.map(|(at, _)| ts(at)),
        deletion_grace_seconds: pod.deletion.map(|(_, grace)| grace),
        generated_name: pod.generated_name,
        node_name: pod.scheduled.then(|| format!("node-{}", pod.node)),
        ready: pod.ready_since.is_some(),
        ready_since: pod.ready_since.map(ts),
        containers: pod.containers,
        // A StatefulSet's pods (fixed names) are set `pod`'s.
        stateful_set: (!pod.generated_name).then(|| STATEFUL_SET.to_owned()),
        ..PodRecord::default()
    }
}

/// The pods as the API shows them to group `g`, whose annotation (under
/// `annotation_key`) each may carry.
pub(super) fn pod_infos(world: &World, g: usize, annotation_key: &str) -> Vec<PodInfo> {
    let records: Vec<PodRecord> = world
        .pods
        .iter()
        .filter(|p| p.object)
        .map(|p| {
            let annotation = p.annotations.get(&g);
            let annotations = annotation
                .map(|value| (annotation_key.to_owned(), value.clone()))
                .into_iter()
                .collect();
            record_of(p, annotations)
        })
        .collect();
    collect_pods(records.iter(), |_| true, None, annotation_key, |_| None)
}

/// The departure of `pod`, whose object left the API at `now`, as the
/// watch's DELETED event shows it.
pub(super) fn departure_of(pod: &SimPod, now: Ms) -> Departure {
    record_of(pod, Vec::new()).departure(ts(now))
}
