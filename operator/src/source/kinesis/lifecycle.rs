//! Shard lifecycle, pure: combines the listed topology, an optional lease
//! table snapshot and what was learned before into engine shards with a
//! [`ShardState`]. A shard is complete when its lease checkpoint is
//! `SHARD_END`, or when its lease is gone after its children started (the
//! KCL deletes a finished parent's lease once a child has checkpointed past
//! its initial position; a lease seen earlier and now gone while children
//! hold leases counts too), and stays complete once seen so. A
//! shard no longer listed (trimmed) drops out; the engine treats unlisted
//! parents as complete. Without a lease table completion cannot be observed,
//! so children are not held back and ordering is reported as not enforced.

use std::collections::{BTreeMap, BTreeSet};

use super::reader::KinesisShard;
use crate::engine::{Shard, ShardState};
use shardring_core::leases::{LeaseSnapshot, LeaseTable};
use shardring_crds::lease_record::CheckpointKind;

/// What the lifecycle remembers between reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleMemory {
    /// Shards seen complete; completion is final, so a lease that later
    /// disappears cannot make a finished parent look unfinished again.
    pub complete: BTreeSet<String>,
    /// Shards whose lease has been seen, so a lease that disappears later is
    /// known to have been removed (not merely not created yet).
    pub leased: BTreeSet<String>,
}

/// The engine's view of a topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle {
    /// Every listed shard with its state, in topology order.
    pub shards: Vec<Shard>,
    /// Whether children wait for their parents (a lease table is configured
    /// and was read). When false the controller shows `OrderingNotEnforced`.
    pub ordering_enforced: bool,
    /// Parent ids of each child, kept even when ordering is not enforced (the
    /// engine shards then carry none), for the published document.
    pub lineage: BTreeMap<String, Vec<String>>,
}

/// Whether a lease's worker has started reading: its checkpoint is a
/// sequence number or the shard's end, not an initial position.
fn has_started(lease: &LeaseSnapshot) -> bool {
    matches!(
        lease.checkpoint,
        Some(CheckpointKind::Sequence | CheckpointKind::ShardEnd)
    )
}

/// Computes the lifecycle. `leases` is `None` without a lease table (or when
/// it could not be read and nothing may be concluded from it).
pub fn derive(
    topology: &[KinesisShard],
    leases: Option<&LeaseTable>,
    lease_table_configured: bool,
    memory: &mut LifecycleMemory,
) -> Lifecycle {
    let listed: BTreeSet<&str> = topology.iter().map(|shard| shard.id.as_str()).collect();
    // Trimmed shards are gone for good: forget them.
    memory.complete.retain(|id| listed.contains(id.as_str()));
    memory.leased.retain(|id| listed.contains(id.as_str()));

    if let Some(leases) = leases {
        let mut children_of: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for shard in topology {
            for parent in shard.parent.iter().chain(shard.adjacent_parent.iter()) {
                children_of
                    .entry(parent.as_str())
                    .or_default()
                    .push(shard.id.as_str());
            }
        }
        for shard in topology {
            let lease = leases.get(&shard.id);
            let finished = lease.is_some_and(|lease| lease.complete);
            // The KCL deletes a finished parent's lease once its children
            // have started (checkpointed past their initial position). A
            // parent without a lease is complete when a child has started,
            // or when its lease was seen before and is now gone while its
            // children hold leases.
            let children = children_of
                .get(shard.id.as_str())
                .map_or(&[][..], Vec::as_slice);
            let child_leases = || children.iter().filter_map(|child| leases.get(child));
            let cleaned_up = shard.closed
                && lease.is_none()
                && (child_leases().any(has_started)
                    || (memory.leased.contains(&shard.id) && child_leases().next().is_some()));
            if finished || cleaned_up {
                memory.complete.insert(shard.id.clone());
            }
        }
        memory.leased.extend(
            topology
                .iter()
                .filter(|shard| leases.get(&shard.id).is_some())
                .map(|shard| shard.id.clone()),
        );
    }

    let ordering_enforced = lease_table_configured;
    let shards = topology
        .iter()
        .map(|shard| Shard {
            id: shard.id.clone(),
            hash_key_range: shard.hash_key_range.clone(),
            parents: if ordering_enforced {
                shard.parents()
            } else {
                Vec::new()
            },
            state: if memory.complete.contains(&shard.id) {
                ShardState::Complete
            } else if shard.closed {
                ShardState::Closed
            } else {
                ShardState::Open
            },
        })
        .collect();
    let lineage = topology
        .iter()
        .filter(|shard| shard.parent.is_some() || shard.adjacent_parent.is_some())
        .map(|shard| (shard.id.clone(), shard.parents()))
        .collect();
    Lifecycle {
        shards,
        ordering_enforced,
        lineage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parents: &[&str], closed: bool) -> KinesisShard {
        KinesisShard {
            id: id.to_owned(),
            parent: parents.first().map(|p| (*p).to_owned()),
            adjacent_parent: parents.get(1).map(|p| (*p).to_owned()),
            hash_key_range: None,
            closed,
        }
    }

    fn lease(id: &str, owner: &str, complete: bool) -> LeaseSnapshot {
        LeaseSnapshot {
            shard_id: id.to_owned(),
            owner: Some(owner.to_owned()),
            counter: 1,
            counter_changed_at: jiff::Timestamp::UNIX_EPOCH,
            checkpoint: None,
            sequence_number: None,
            complete,
            parents: Vec::new(),
            children: Vec::new(),
            checkpoint_owner: None,
            throughput_kbps: None,
        }
    }

    fn table(leases: &[LeaseSnapshot]) -> LeaseTable {
        LeaseTable {
            leases: leases
                .iter()
                .map(|l| (l.shard_id.clone(), l.clone()))
                .collect(),
            scanned_at: None,
            items: leases.len(),
        }
    }

    fn states(lifecycle: &Lifecycle) -> Vec<(String, ShardState)> {
        lifecycle
            .shards
            .iter()
            .map(|s| (s.id.clone(), s.state))
            .collect()
    }

    fn split() -> Vec<KinesisShard> {
        vec![
            shard("p", &[], true),
            shard("c1", &["p"], false),
            shard("c2", &["p"], false),
        ]
    }

    #[test]
    fn shard_end_completes_the_parent() {
        let mut memory = LifecycleMemory::default();
        let open = derive(
            &split(),
            Some(&table(&[lease("p", "a", false)])),
            true,
            &mut memory,
        );
        assert_eq!(open.shards[0].state, ShardState::Closed);
        let done = derive(
            &split(),
            Some(&table(&[lease("p", "a", true)])),
            true,
            &mut memory,
        );
        assert_eq!(done.shards[0].state, ShardState::Complete);
        assert!(done.ordering_enforced);
        assert_eq!(done.shards[1].parents, vec!["p"]);
    }

    fn at(lease: LeaseSnapshot, checkpoint: CheckpointKind) -> LeaseSnapshot {
        LeaseSnapshot {
            checkpoint: Some(checkpoint),
            ..lease
        }
    }

    #[test]
    fn removed_lease_after_children_started_completes_and_stays_complete() {
        let mut memory = LifecycleMemory::default();
        // No parent lease and no child lease: nothing to conclude.
        let unknown = derive(&split(), Some(&table(&[])), true, &mut memory);
        assert_eq!(unknown.shards[0].state, ShardState::Closed);
        // A child lease created ahead (still at TRIM_HORIZON) proves nothing.
        let ahead = table(&[at(lease("c1", "a", false), CheckpointKind::TrimHorizon)]);
        let waiting = derive(&split(), Some(&ahead), true, &mut memory);
        assert_eq!(waiting.shards[0].state, ShardState::Closed);
        // A child that checkpointed a record has started: the parent is done.
        let started = table(&[at(lease("c1", "a", false), CheckpointKind::Sequence)]);
        let cleaned = derive(&split(), Some(&started), true, &mut memory);
        assert_eq!(cleaned.shards[0].state, ShardState::Complete);
        // The lease table read fails next time: completion is remembered.
        let later = derive(&split(), None, true, &mut memory);
        assert_eq!(later.shards[0].state, ShardState::Complete);
    }

    #[test]
    fn a_parent_lease_seen_then_removed_completes_it() {
        let mut memory = LifecycleMemory::default();
        let child = at(lease("c1", "a", false), CheckpointKind::TrimHorizon);
        let both = table(&[lease("p", "a", false), child.clone()]);
        assert_eq!(
            derive(&split(), Some(&both), true, &mut memory).shards[0].state,
            ShardState::Closed
        );
        let removed = derive(&split(), Some(&table(&[child])), true, &mut memory);
        assert_eq!(removed.shards[0].state, ShardState::Complete);
    }

    #[test]
    fn trimmed_shards_drop_out_and_are_forgotten() {
        let mut memory = LifecycleMemory::default();
        derive(
            &split(),
            Some(&table(&[lease("p", "a", true)])),
            true,
            &mut memory,
        );
        let trimmed = vec![shard("c1", &["p"], false), shard("c2", &["p"], false)];
        let result = derive(&trimmed, Some(&table(&[])), true, &mut memory);
        assert_eq!(
            states(&result),
            vec![
                ("c1".into(), ShardState::Open),
                ("c2".into(), ShardState::Open)
            ]
        );
        assert!(memory.complete.is_empty());
    }

    #[test]
    fn without_a_lease_table_children_are_free_and_parents_stay_closed() {
        let mut memory = LifecycleMemory::default();
        let result = derive(&split(), None, false, &mut memory);
        assert!(!result.ordering_enforced);
        assert_eq!(result.shards[0].state, ShardState::Closed);
        assert!(result.shards.iter().all(|s| s.parents.is_empty()));
        assert_eq!(result.lineage.get("c1"), Some(&vec!["p".to_owned()]));
    }

    #[test]
    fn merges_need_both_parents() {
        let topology = vec![
            shard("a", &[], true),
            shard("b", &[], true),
            shard("m", &["a", "b"], false),
        ];
        let mut memory = LifecycleMemory::default();
        let result = derive(
            &topology,
            Some(&table(&[lease("a", "x", true), lease("b", "y", false)])),
            true,
            &mut memory,
        );
        assert_eq!(result.shards[0].state, ShardState::Complete);
        assert_eq!(result.shards[1].state, ShardState::Closed);
        assert_eq!(result.shards[2].parents, vec!["a", "b"]);
    }
}
