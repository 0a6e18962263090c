//! The published records a step may keep without looking at them. Most of
//! a large group's records are plain: a shard `Active` on its owner, with
//! no handoff, no hold and no standbys, whose parents and hash key range
//! are the topology's. The step keeps such a record exactly when the
//! engine left the shard on that owner and nobody is waited for, so a plan
//! whose engine started from the published document need look only at the
//! records that are not plain and at the shards the engine moved, left
//! unassigned or holds pending (at 20,000 shards, looking at every record
//! was most of a pod event's step).
//!
//! Which records are not plain is read once per published document and
//! topology ([`PlainRecords::read`]; the plan memory does it between
//! events). Debug builds run the whole step beside the skipping one and
//! compare them.

use std::sync::{Arc, Weak};

use crate::crds::{AssignmentDocument, HashKeyRange, ShardPhase};
use crate::engine::{PlanOutput, Shard, ShardState};
use crate::identity::Identities;
use crate::topology::Topology;

/// The records of one published document that are not plain, read
/// against one topology.
#[derive(Debug, Clone)]
pub(crate) struct PlainRecords {
    /// The topology's shards the records were read against.
    topology: Weak<Vec<Shard>>,
    /// The ids of the records that are not plain, sorted.
    not_plain: Vec<String>,
}

impl PlainRecords {
    /// Reads `doc`'s records against `topology`; `None` when they are not
    /// the topology's shards, in order (each shard's record, and no other).
    pub(crate) fn read(doc: &AssignmentDocument, topology: &Topology) -> Option<Self> {
        if doc.shards.len() != topology.shards.len() {
            return None;
        }
        let mut not_plain = Vec::new();
        for ((id, record), shard) in doc.shards.iter().zip(topology.sorted_by_id()) {
            if *id != shard.id {
                return None;
            }
            let plain = shard.state != ShardState::Complete
                && record.state == ShardPhase::Active
                && record.owner.is_some()
                && record.handoff.is_none()
                && record.return_hold.is_none()
                && record.standbys.is_empty()
                && record.parents == shard.parents
                && same_range(
                    record.hash_key_range.as_deref(),
                    shard.hash_key_range.as_ref(),
                );
            if !plain {
                not_plain.push(id.clone());
            }
        }
        Some(Self {
            topology: Arc::downgrade(&topology.shards),
            not_plain,
        })
    }

    /// Whether these were read against `topology`.
    pub(crate) fn of(&self, topology: &Topology) -> bool {
        std::ptr::eq(self.topology.as_ptr(), Arc::as_ptr(&topology.shards))
    }
}

/// What one step may skip: the keys of the published records it must look
/// at (the document's own, in id order), and the topology's shards in id
/// order (aligned with the records).
pub(crate) struct Skips<'a> {
    pub(super) check: Vec<&'a String>,
    pub(super) sorted: Vec<&'a Shard>,
}

/// The skips of a step of `doc` (the published document, the previous
/// assignment the engine planned from) whose plain records are `plain`:
/// `None` when the step must look at every record (the records read
/// against another topology, a pod waited for, standbys planned, an id the
/// document lacks).
pub(crate) fn skips<'a>(
    plain: &PlainRecords,
    doc: &'a AssignmentDocument,
    topology: &'a Topology,
    output: &PlanOutput,
    identities: &Identities,
    standbys: u32,
) -> Option<Skips<'a>> {
    if !plain.of(topology) || !identities.returning.is_empty() || standbys > 0 {
        return None;
    }
    let mut ids: Vec<&str> = plain
        .not_plain
        .iter()
        .chain(output.move_list.iter().map(|m| &m.shard))
        .chain(&output.unassigned)
        .chain(&output.pending)
        .map(String::as_str)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let check = ids
        .into_iter()
        .map(|id| doc.shards.get_key_value(id).map(|(key, _)| key))
        .collect::<Option<Vec<&String>>>()?;
    Some(Skips {
        check,
        sorted: topology.sorted_by_id(),
    })
}

/// Whether a record's hash key range is the topology's.
pub(super) fn same_range(
    record: Option<&HashKeyRange>,
    topology: Option<&crate::engine::HashKeyRange>,
) -> bool {
    match (record, topology) {
        (None, None) => true,
        (Some(r), Some(t)) => r.start == t.start && r.end == t.end,
        _ => false,
    }
}
