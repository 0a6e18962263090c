//! What a plan keeps for the next plan of the same caller, so that a pod
//! change costs what changed rather than the size of the group: each
//! shard's owner as an index into the plan's eligible pods (the pods the
//! kept ring was built of), and the output's assignment itself, shared with
//! the caller's output until the caller lets go of it.
//!
//! The next plan uses them only when its previous assignment is that very
//! output (checked once per previous assignment, by the caller's
//! [`EngineMemory::expect_previous`](crate::EngineMemory::expect_previous)
//! ahead of the plan, else by the plan) and it plans the same shards for
//! the same consumer without standbys. Then the model resolves every
//! previous owner from the kept indices instead of looking each name up,
//! and the output writes the owners that changed into the kept assignment
//! instead of building every entry anew ([`crate::output::patch`]).
//! Placement runs as always, so the output is the one a plan without
//! memory makes; debug builds check the patched output against the built
//! one.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use crate::model::{KeptOwner, NONE, PodRec, index};
use crate::types::{PlanInput, PreviousAssignment, Shard, ShardAssignment};

/// The last plan's owners and assignment (see the module).
pub(crate) struct LastPlan {
    /// The shards it planned, and for which consumer (its shard table).
    shards: Weak<Vec<Shard>>,
    consumer: String,
    /// The kept ring's pods its owner indices point into.
    pods_generation: u64,
    /// Per shard, in the shard table's order: its owner's index in the
    /// eligible pods, or `NONE`.
    owner: Vec<u32>,
    /// The output's assignment.
    pub(crate) assignment: Arc<BTreeMap<String, ShardAssignment>>,
    /// The last previous assignment found to be `assignment`'s owners.
    verified: Weak<PreviousAssignment>,
}

impl Clone for LastPlan {
    /// A copy of its own: a memory's clone plans apart from the memory, and
    /// an assignment both shared would be copied by the patch of each.
    fn clone(&self) -> Self {
        Self {
            shards: self.shards.clone(),
            consumer: self.consumer.clone(),
            pods_generation: self.pods_generation,
            owner: self.owner.clone(),
            assignment: Arc::new((*self.assignment).clone()),
            verified: self.verified.clone(),
        }
    }
}

impl LastPlan {
    /// What a plan of `input` keeps, its owners `owner` being indices into
    /// the kept ring's pods of generation `pods_generation`; `None` for a
    /// plan the next could not patch (standbys).
    pub(crate) fn of(
        input: &PlanInput,
        pods_generation: u64,
        owner: &[u32],
        assignment: &Arc<BTreeMap<String, ShardAssignment>>,
    ) -> Option<Self> {
        (input.options.standbys == 0).then(|| Self {
            shards: Arc::downgrade(&input.shards),
            consumer: input.options.consumer_name.clone(),
            pods_generation,
            owner: owner.to_vec(),
            assignment: Arc::clone(assignment),
            verified: Weak::new(),
        })
    }

    /// Whether a plan of `input` could build on this one: the same shards
    /// (the same list) for the same consumer, without standbys.
    pub(crate) fn plans_again(&self, input: &PlanInput) -> bool {
        input.options.standbys == 0
            && std::ptr::eq(self.shards.as_ptr(), Arc::as_ptr(&input.shards))
            && self.consumer == input.options.consumer_name
    }

    /// Checks, once per previous assignment, that `previous` is this plan's
    /// assignment (an entry for every shard it gave an owner, naming that
    /// owner, and no other entry); whether it is.
    pub(crate) fn expect_previous(&mut self, previous: &Arc<PreviousAssignment>) -> bool {
        if std::ptr::eq(self.verified.as_ptr(), Arc::as_ptr(previous)) {
            return true;
        }
        if !assigns_as(previous, &self.assignment) {
            return false;
        }
        self.verified = Arc::downgrade(previous);
        true
    }

    /// Notes that `previous` is this plan's assignment, known without a
    /// check: the plan patched nothing into the assignment `previous` was
    /// found to be.
    pub(crate) fn checked_against(&mut self, previous: &Arc<PreviousAssignment>) {
        self.verified = Arc::downgrade(previous);
    }

    /// Each shard's previous owner for a plan of `input` on the eligible
    /// pods `pods`, the kept ring's pods being `kept_pods` of generation
    /// `generation` (both sorted by name); `None` unless `input`'s previous
    /// assignment is this plan's and its indices point into `kept_pods`.
    pub(crate) fn kept_owners(
        &mut self,
        input: &PlanInput,
        (kept_pods, generation): (&[String], u64),
        pods: &[PodRec<'_>],
    ) -> Option<Vec<KeptOwner>> {
        if generation != self.pods_generation || !self.expect_previous(&input.previous) {
            return None;
        }
        // Old index -> new index, by a merge of the two sorted name lists.
        let mut now = vec![NONE; kept_pods.len()];
        let mut at = 0;
        for (old, name) in kept_pods.iter().enumerate() {
            while at < pods.len() && pods[at].name < name.as_str() {
                at += 1;
            }
            if at < pods.len() && pods[at].name == name {
                now[old] = index(at);
            }
        }
        Some(
            self.owner
                .iter()
                .map(|&old| match old {
                    NONE => KeptOwner::Unowned,
                    old => match now.get(old as usize).copied().unwrap_or(NONE) {
                        NONE => KeptOwner::Gone,
                        e => KeptOwner::Eligible(e),
                    },
                })
                .collect(),
        )
    }
}

/// Whether `previous` lists exactly the owners of `assignment`'s entries
/// that have one, by the same ids.
fn assigns_as(
    previous: &PreviousAssignment,
    assignment: &BTreeMap<String, ShardAssignment>,
) -> bool {
    let mut entries = previous.iter();
    for (id, entry) in assignment.iter() {
        let Some(owner) = &entry.owner else {
            continue;
        };
        match entries.next() {
            Some((previous_id, previous)) if previous_id == id && previous.owner() == owner => {}
            _ => return false,
        }
    }
    entries.next().is_none()
}
