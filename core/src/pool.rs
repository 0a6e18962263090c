//! Pool-wide balance, the core's side: who decides the ⌈⌉ quotas of the
//! count-mode ShardGroups that share one ConsumerPool, and from what.
//!
//! The unit that decides is the pool: one [`PoolBook`] per pool keeps the
//! pool's last deal ([`crate::engine::pool::deal`]) with what it was dealt
//! from (the eligible pods and each group's readable shard count). Every
//! group's observe step asks the book for its row; the book deals again
//! only when those inputs changed, from what every group holds now (the
//! published documents, [`holdings_in`]) and its previous deal.
//! So the groups of a pool apply rows of one decision: a group that has
//! moved to its row never sees the others' half-applied state as a reason
//! to decide differently (deciding from each other's totals would flap),
//! and a converged pool deals nothing and writes nothing. A book that was
//! lost (a restart, a new leader) is rebuilt from the documents: at rest
//! they are the deal, which deals back to itself.
//!
//! A pool with a single count-mode group gets no row ([`None`]): it is
//! planned alone, exactly as before pool-wide balance. Groups in
//! `hashRange` or `throughput` mode are planned alone too, and their shards
//! do not count toward the count-mode deal.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::crds::assignment::ShardPhase;
use crate::crds::shard_group::BalanceMode;
use crate::crds::{AssignmentDocument, ConsumerPool, ShardGroup};
use crate::engine::pool::{Ceilings, PoolGroup, PoolInput, PoolPod, deal};
use crate::observation::PodInfo;

/// One count-mode group of a pool: its name and readable shard count (what
/// a deal is made from; what each pod holds is read only to deal again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMember {
    /// `namespace/name` of the ShardGroup.
    pub group: String,
    /// Readable shards it assigns.
    pub readable: u64,
}

/// The readable shards of a published document: its Active and Revoking
/// shards (a count, without building anything).
pub fn readable_in(doc: &AssignmentDocument) -> u64 {
    doc.shards
        .values()
        .filter(|s| matches!(s.state, ShardPhase::Active | ShardPhase::Revoking))
        .count() as u64
}

/// Readable shards per pod in a published document, each counted for the
/// pod that reads it once its handoff ends (as the engine counts a previous
/// owner).
pub fn holdings_in(doc: &AssignmentDocument) -> BTreeMap<String, u64> {
    let mut holdings = BTreeMap::new();
    for owner in crate::handoff::engine_previous(Some(doc)).values() {
        *holdings.entry(owner.owner().to_owned()).or_insert(0) += 1;
    }
    holdings
}

/// Whether `group` takes part in its pool's count-mode deal.
pub fn deals(group: &ShardGroup) -> bool {
    group.spec.balance == BalanceMode::Count && group.metadata.deletion_timestamp.is_none()
}

/// What a deal was made from: when it is the same, so is the deal.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dealt {
    pods: Vec<PoolPod>,
    max_shards_per_pod: u32,
    groups: Vec<(String, u64)>,
}

/// One pool's last deal and what it was dealt from.
#[derive(Debug, Clone, Default)]
pub struct PoolBook {
    last: Option<(Dealt, Ceilings)>,
}

/// A group's row of the pool's deal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolRow {
    /// The pods that take the group's ⌈⌉ quotas (`PlanInput::ceilings`).
    pub ceilings: Vec<String>,
    /// The other groups whose rows a new deal changed: they must plan again
    /// (a pod event wakes them anyway; a group that joined, left or changed
    /// its shard count does not).
    pub changed: Vec<String>,
}

impl PoolBook {
    /// The row of `group` in the deal of `pool` over `members` (every
    /// count-mode group of the pool, `group` among them) on the pool's
    /// `pods` at `now`; `None` when the pool has fewer than two members.
    /// `holdings` reads what a member's pods hold now, only when the pool
    /// must be dealt again.
    pub fn row(
        &mut self,
        group: &str,
        pool: &ConsumerPool,
        pods: &[PodInfo],
        mut members: Vec<PoolMember>,
        mut holdings: impl FnMut(&str) -> BTreeMap<String, u64>,
        now: Timestamp,
    ) -> Option<PoolRow> {
        if members.len() < 2 || !members.iter().any(|m| m.group == group) {
            return None;
        }
        members.sort_by(|a, b| a.group.cmp(&b.group));
        let eligible: Vec<PoolPod> = crate::plan::engine_pods(pods, pool, now)
            .into_iter()
            .filter(|p| p.ready && !p.terminating)
            .map(|p| PoolPod {
                name: p.name,
                capacity: p.capacity,
                ready_since: p.ready_since,
            })
            .collect();
        let dealt = Dealt {
            pods: eligible,
            max_shards_per_pod: pool.spec.max_shards_per_pod.unwrap_or(0),
            groups: members
                .iter()
                .map(|m| (m.group.clone(), m.readable))
                .collect(),
        };
        let mut changed = Vec::new();
        let fresh = self.last.as_ref().is_some_and(|(last, _)| *last == dealt);
        if !fresh {
            let before = self
                .last
                .take()
                .map(|(_, ceilings)| ceilings)
                .unwrap_or_default();
            let input = PoolInput {
                pods: dealt.pods.clone(),
                max_shards_per_pod: dealt.max_shards_per_pod,
                groups: members
                    .into_iter()
                    .map(|m| PoolGroup {
                        previous: before.get(&m.group).cloned().unwrap_or_default(),
                        holdings: holdings(&m.group),
                        name: m.group,
                        readable: m.readable,
                    })
                    .collect(),
            };
            let ceilings = deal(&input);
            changed = ceilings
                .iter()
                .filter(|(name, row)| *name != group && before.get(*name) != Some(*row))
                .map(|(name, _)| name.clone())
                .collect();
            self.last = Some((dealt, ceilings));
        }
        let (_, ceilings) = self.last.as_ref()?;
        Some(PoolRow {
            ceilings: ceilings.get(group).cloned().unwrap_or_default(),
            changed,
        })
    }
}
