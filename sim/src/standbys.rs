//! What the checks of pool mode can hold standbys to. Standbys are a
//! hint, never read, and their places have limits the pool's deal of
//! standby slots does not see:
//! - topology beats even spread: a standby shares its owner's node only
//!   when every pod on another is taken;
//! - a shard's standby is never its owner, so a pod holds at most one slot
//!   per shard it does not own: a row of the deal that gives a pod more
//!   (a small group on few pods) cannot be made so.
//!
//! Where neither limit binds ([`Sim::standby_rows_attainable`]) every row
//! is made so, and the slots of the groups the pool deals are held to one
//! slot of each other over the pool, and planning again moves no standby.
//! Where one binds, the operator's book keeps a deal whose rows the plans
//! could not make so while its inputs stay the same, a new leader deals
//! from where the slots are instead, and the engine's placement is not
//! always a fixed point (a pod its previous standbys keep over its quota
//! loses one to the walk, which may put it elsewhere than the plan
//! before): a plan once quiet may move standbys (and nothing else); that
//! is counted ([`crate::pool::PoolNotes`]), not failed. So is it for a
//! group whose slots are not dealt (the only one with standbys: planned
//! alone, by the engine's own quotas).

use crate::crds::AssignmentDocument;
use crate::sim::Sim;
use shardring_core::plan::{Decision, Moves};

impl Sim {
    /// Whether every row of the deal of standby slots can be made so: the
    /// eligible pods' nodes leave a standby's place no choice (all on one
    /// node, or each on its own), and no pod's slot quota in a group
    /// exceeds the shards it does not own (count groups, whose owners
    /// are within one of each other: ⌈N·R/P⌉ ≤ R − ⌈R/P⌉).
    pub fn standby_rows_attainable(&self) -> bool {
        let nodes: Vec<usize> = self.eligible_since().map(|(p, _)| p.node).collect();
        let pods = nodes.len() as u64;
        let mut distinct = nodes.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let topology_neutral = distinct.len() <= 1 || distinct.len() == nodes.len();
        let owners_leave_room = (0..self.op.groups.len()).all(|g| {
            let spec = &self.op.groups[g].shard_group.spec;
            let per_shard = u64::from(spec.standbys).min(pods.saturating_sub(1));
            if per_shard == 0 {
                return true;
            }
            let readable = self.op.groups[g]
                .doc
                .as_ref()
                .map_or(0, shardring_core::pool::readable_in);
            spec.balance.counts_shards()
                && (per_shard * readable).div_ceil(pods) <= readable - readable.div_ceil(pods)
        });
        pods > 0 && topology_neutral && owners_leave_room
    }

    /// Whether the pool deals standby slots (two groups or more with
    /// standbys; one is planned alone).
    pub fn standbys_dealt(&self) -> bool {
        let with_standbys = self.op.groups.iter();
        with_standbys
            .filter(|g| g.shard_group.spec.standbys > 0)
            .count()
            > 1
    }

    /// Whether `again`, a plan of group `g`, gives only other standbys: it
    /// moves no shard and its document differs from the published one in
    /// standbys, and in nothing else.
    pub(crate) fn only_standbys_change(&self, g: usize, again: &Decision) -> bool {
        let (Some(write), Some(doc)) = (&again.document_write, &self.op.groups[g].doc) else {
            return false;
        };
        let without_standbys = |doc: &AssignmentDocument| {
            let mut doc = doc.clone();
            doc.epoch = 0;
            for record in doc.shards.values_mut() {
                record.standbys.clear();
            }
            for pod in doc.pods.values_mut() {
                pod.standby.clear();
            }
            doc.pods.retain(|_, pod| !pod.is_empty());
            doc
        };
        let standbys = |doc: &AssignmentDocument| {
            let lists = doc.shards.values().map(|r| r.standbys.clone());
            lists.collect::<Vec<_>>()
        };
        again.moves == Moves::default()
            && without_standbys(&write.document) == without_standbys(doc)
            && standbys(&write.document) != standbys(doc)
    }
}
