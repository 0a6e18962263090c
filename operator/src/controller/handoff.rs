//! The handoff step: turns the engine's owners into the per-shard records of
//! the published document. It sits between "engine result" and "document" so
//! the two-phase protocol (revoke from the old owner, wait for evidence it let
//! go, then activate on the new one) extends exactly this function: it sees
//! the previous records (with their `state` and `handoff`), the engine's
//! moves and the observation's time.
//!
//! Today every move publishes directly: the shard is `Active` on its new owner
//! in the same epoch that removes it from the old one.

use std::collections::{BTreeMap, BTreeSet};

use crate::crds::{HashKeyRange, ShardPhase, ShardRecord};
use crate::engine::{PlanOutput, ShardState};
use crate::source::Topology;

/// Builds the shard records for a topology and the engine's result.
///
/// Complete shards stay listed as `Complete` while the source lists them, so
/// consumers can see a parent is done; pending children are `Pending` with no
/// owner; readable shards the engine could not place have no owner.
pub fn shard_records(topology: &Topology, output: &PlanOutput) -> BTreeMap<String, ShardRecord> {
    let pending: BTreeSet<&str> = output.pending.iter().map(String::as_str).collect();
    topology
        .shards
        .iter()
        .map(|shard| {
            let hash_key_range = shard.hash_key_range.as_ref().map(|r| HashKeyRange {
                start: r.start.clone(),
                end: r.end.clone(),
            });
            let mut record = ShardRecord {
                parents: shard.parents.clone(),
                hash_key_range,
                ..Default::default()
            };
            if shard.state == ShardState::Complete {
                record.state = ShardPhase::Complete;
            } else if pending.contains(shard.id.as_str()) {
                record.state = ShardPhase::Pending;
            } else if let Some(assigned) = output.assignment.get(&shard.id) {
                record.state = ShardPhase::Active;
                record.owner = assigned.owner.clone();
                record.standbys = assigned.standbys.clone();
            }
            (shard.id.clone(), record)
        })
        .collect()
}
