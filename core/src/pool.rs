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
use crate::engine::Pod;
use crate::engine::pool::{Ceilings, PoolGroup, PoolInput, deal};
use crate::identity::Returning;
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
struct DealtFrom {
    /// The eligible pods.
    pods: Vec<Pod>,
    max_shards_per_pod: u32,
    groups: Vec<(String, u64)>,
}

/// One pool's last deal and what it was dealt from.
#[derive(Debug, Clone, Default)]
pub struct PoolBook {
    last: Option<(DealtFrom, Ceilings)>,
    /// Each group's readable shards as its own last observation counted
    /// them (its source, fresher than its document): a group whose count
    /// changed deals with its new count at once, and its peers deal with
    /// the same count before its next document is out.
    reported: BTreeMap<String, u64>,
}

/// The pool a deal is made on: its spec, its selected pods, and those away
/// that it waits for ([`crate::identity`]).
#[derive(Debug, Clone, Copy)]
pub struct PoolPods<'a> {
    /// The pool.
    pub pool: &'a ConsumerPool,
    /// Its pods, as the observation holds them.
    pub pods: &'a [PodInfo],
    /// Pods away that it waits for, dealt to as if they were here.
    pub returning: &'a BTreeMap<String, Returning>,
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
    /// count-mode group of the pool, `group` among them, with the readable
    /// count of its own observation; the others' from their documents,
    /// unless they reported a fresher one here) on the pool's
    /// `pods` (and those away but `returning`, dealt to as if they were
    /// here: see [`crate::identity`]) at `now`; `None` when the pool has
    /// fewer than two members.
    /// `holdings` reads what a member's pods hold now, only when the pool
    /// must be dealt again.
    pub fn row(
        &mut self,
        group: &str,
        PoolPods {
            pool,
            pods,
            returning,
        }: PoolPods<'_>,
        mut members: Vec<PoolMember>,
        mut holdings: impl FnMut(&str) -> BTreeMap<String, u64>,
        now: Timestamp,
    ) -> Option<PoolRow> {
        if members.len() < 2 || !members.iter().any(|m| m.group == group) {
            return None;
        }
        members.sort_by(|a, b| a.group.cmp(&b.group));
        self.reported
            .retain(|name, _| members.iter().any(|m| &m.group == name));
        for member in &mut members {
            if member.group == group {
                self.reported.insert(member.group.clone(), member.readable);
            } else if let Some(&readable) = self.reported.get(&member.group) {
                member.readable = readable;
            }
        }
        let eligible: Vec<Pod> = crate::plan::engine_pods(pods, pool, returning, now)
            .into_iter()
            .filter(|p| p.ready && !p.terminating)
            .collect();
        let dealt = DealtFrom {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::fixtures::{now, pod_info, pool};

    fn members(groups: usize, readable: u64) -> Vec<PoolMember> {
        (0..groups)
            .map(|g| PoolMember {
                group: format!("ns/g-{g}"),
                readable,
            })
            .collect()
    }

    fn pods(n: usize) -> Vec<PodInfo> {
        (0..n).map(|i| pod_info(&format!("p-{i}"))).collect()
    }

    /// Every group's row of `book`, each group asking with `holdings`.
    fn rows(
        book: &mut PoolBook,
        groups: usize,
        readable: u64,
        pods: &[PodInfo],
        holdings: &BTreeMap<String, BTreeMap<String, u64>>,
    ) -> BTreeMap<String, PoolRow> {
        (0..groups)
            .map(|g| {
                let name = format!("ns/g-{g}");
                let row = book
                    .row(
                        &name,
                        PoolPods {
                            pool: &pool(0),
                            pods,
                            returning: &BTreeMap::new(),
                        },
                        members(groups, readable),
                        |m| holdings.get(m).cloned().unwrap_or_default(),
                        now(),
                    )
                    .expect("a pool of several groups");
                (name, row)
            })
            .collect()
    }

    /// What each group holds once it applied its row (one shard on each
    /// of its ⌈⌉ pods: groups of fewer shards than pods).
    fn applied(rows: &BTreeMap<String, PoolRow>) -> BTreeMap<String, BTreeMap<String, u64>> {
        rows.iter()
            .map(|(g, row)| {
                (
                    g.clone(),
                    row.ceilings.iter().map(|p| (p.clone(), 1)).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_pool_of_one_group_is_planned_alone() {
        let mut book = PoolBook::default();
        let row = book.row(
            "ns/g-0",
            PoolPods {
                pool: &pool(0),
                pods: &pods(3),
                returning: &BTreeMap::new(),
            },
            members(1, 4),
            |_| BTreeMap::new(),
            now(),
        );
        assert_eq!(row, None);
    }

    #[test]
    fn the_groups_apply_rows_of_one_deal_and_a_pool_at_rest_deals_nothing() {
        let pods = pods(8);
        let mut book = PoolBook::default();
        // Nothing published yet: the first group deals, the others take
        // their rows of that deal.
        let first = rows(&mut book, 20, 2, &pods, &BTreeMap::new());
        let mut per_pod: BTreeMap<&str, usize> = BTreeMap::new();
        for row in first.values() {
            assert_eq!(row.ceilings.len(), 2);
            for pod in &row.ceilings {
                *per_pod.entry(pod).or_default() += 1;
            }
        }
        assert_eq!(per_pod.values().copied().collect::<Vec<_>>(), vec![5; 8]);
        // Only the first ask dealt (and named the others as changed).
        assert_eq!(first["ns/g-0"].changed.len(), 19);
        assert!(first.iter().skip(1).all(|(_, row)| row.changed.is_empty()));

        // As the groups apply their rows the inputs of the deal stay the
        // same: nobody deals again, whatever the others hold meanwhile.
        let half: BTreeMap<_, _> = applied(&first).into_iter().take(10).collect();
        assert_eq!(
            rows(&mut book, 20, 2, &pods, &half),
            first_without_changes(&first)
        );

        // A book lost (a restart) is dealt again from the documents at
        // rest, and deals the same rows.
        let mut restarted = PoolBook::default();
        let again = rows(&mut restarted, 20, 2, &pods, &applied(&first));
        for (g, row) in &again {
            assert_eq!(row.ceilings, first[g].ceilings, "{g}");
        }
    }

    fn first_without_changes(rows: &BTreeMap<String, PoolRow>) -> BTreeMap<String, PoolRow> {
        rows.iter()
            .map(|(g, row)| {
                let row = PoolRow {
                    ceilings: row.ceilings.clone(),
                    changed: Vec::new(),
                };
                (g.clone(), row)
            })
            .collect()
    }

    #[test]
    fn a_pod_event_deals_again_from_what_every_group_holds() {
        let mut book = PoolBook::default();
        let before = rows(&mut book, 20, 2, &pods(8), &BTreeMap::new());
        let held = applied(&before);
        let after = rows(&mut book, 20, 2, &pods(9), &held);
        let mut moved = 0;
        for (g, row) in &after {
            moved += row
                .ceilings
                .iter()
                .filter(|p| !before[g].ceilings.contains(p))
                .count();
        }
        // The new pod takes its ⌊40/9⌋ = 4 and nothing else moves.
        assert_eq!(moved, 4);
        let new: usize = after
            .values()
            .filter(|r| r.ceilings.contains(&"p-8".to_owned()))
            .count();
        assert_eq!(new, 4);
    }

    #[test]
    fn a_group_whose_count_changed_deals_at_once_and_its_peers_with_the_same_count() {
        let pods = pods(8);
        let mut book = PoolBook::default();
        let first = rows(&mut book, 20, 2, &pods, &BTreeMap::new());
        let held = applied(&first);
        let holdings = |m: &str| held.get(m).cloned().unwrap_or_default();
        // g-0 now has 4 partitions (its source says so); its document still 2.
        let mut grown = members(20, 2);
        grown[0].readable = 4;
        let row = book
            .row(
                "ns/g-0",
                PoolPods {
                    pool: &pool(0),
                    pods: &pods,
                    returning: &BTreeMap::new(),
                },
                grown,
                holdings,
                now(),
            )
            .expect("a row");
        assert_eq!(row.ceilings.len(), 4);
        // Its two new extras fit beside the others' (42 over 8: at most 6
        // a pod), so the new deal keeps every other row as it was.
        assert!(row.changed.is_empty(), "{:?}", row.changed);
        // A peer asks with g-0's document count: the book knows better,
        // and does not deal again.
        let peer = book
            .row(
                "ns/g-1",
                PoolPods {
                    pool: &pool(0),
                    pods: &pods,
                    returning: &BTreeMap::new(),
                },
                members(20, 2),
                holdings,
                now(),
            )
            .expect("a row");
        assert!(peer.changed.is_empty());
        let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
        for g in 0..20 {
            let name = format!("ns/g-{g}");
            let mut asked = members(20, 2);
            asked[0].readable = if g == 0 { 4 } else { 2 };
            let row = book
                .row(
                    &name,
                    PoolPods {
                        pool: &pool(0),
                        pods: &pods,
                        returning: &BTreeMap::new(),
                    },
                    asked,
                    holdings,
                    now(),
                )
                .expect("a row");
            for pod in row.ceilings {
                *per_pod.entry(pod).or_default() += 1;
            }
        }
        // 42 extras over 8 pods: 5 or 6 each.
        assert!(per_pod.values().all(|&n| n == 5 || n == 6), "{per_pod:?}");
    }
}
