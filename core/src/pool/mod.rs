//! Pool-wide balance, the core's side: what each ShardGroup takes from the
//! balance of the pods it shares with other groups ([`PoolShare`]), and
//! who decides it.
//!
//! The pods of a ConsumerPool (and of pools that select some of the same
//! pods: one balance, [`domains`]) serve several groups, and the balance
//! that counts is over everything a pod serves:
//! - count-mode groups have their ⌈⌉ quotas dealt together
//!   ([`crate::engine::pool::deal`]): every pod within one shard of its
//!   share of them all, every group within one of its own;
//! - the standby slots of the groups with standbys are dealt the same way;
//! - throughput groups move their shards for each pod's whole load over
//!   the pool's throughput groups (the load the others put on each pod,
//!   [`PoolShare::load`]), one group at a time ([`turn`]).
//!
//! `hashRange` groups are planned alone, and a pool mixing modes balances
//! each mode over its own groups (a count and a load are not one measure).
//!
//! The unit that decides is the balance: one [`PoolBook`] per balance
//! keeps the last count and standby deals with what they were dealt from
//! (the eligible pods, each group's units), and every group's observe step
//! asks it for its share ([`PoolBook::share`]). It deals again only when
//! those inputs changed, from what every group holds now (the published
//! documents) and its previous deal, so the groups of a pool apply rows of
//! one decision: a group that has moved to its row never sees the others'
//! half-applied state as a reason to decide differently (deciding from
//! each other's totals would flap), and a converged pool deals nothing and
//! writes nothing. A book that was lost (a restart, a new leader) is
//! rebuilt from the documents: at rest they are the deal, which deals back
//! to itself. Which groups reconcile first after a new deal is
//! [`precedence`]'s bookkeeping.

mod deals;
mod domain;
mod peer;
pub mod precedence;
#[cfg(test)]
mod tests;
pub mod turn;

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use crate::crds::ConsumerPool;
use crate::crds::shard_group::PoolBalanceStatus;
use crate::engine::PodLoad;
use crate::engine::pool::PoolLoads;
use crate::identity::Returning;
use crate::observation::PodInfo;

use self::deals::{DealBook, DealtFrom};
use self::turn::Turn;

pub use self::domain::{domain_of, domains};
pub use self::peer::{
    Peer, holdings_in, measured_loads, measured_loads_of, readable_in, standby_holdings_in,
};

/// What a group takes from its pool's balance, for its plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolShare {
    /// Count mode: the pods the pool's deal gives this group's ⌈⌉ quotas
    /// (`PlanInput::ceilings`); `None`: planned alone.
    pub ceilings: Option<Vec<String>>,
    /// The pods the pool's deal of standby slots gives this group's ⌈⌉
    /// slot quotas (`PlanInput::standby_ceilings`); `None`: alone.
    pub standby_ceilings: Option<Vec<String>>,
    /// Throughput mode: the load the pool's other throughput groups put on
    /// each pod (`PlanInput::pool_load`); empty: balanced alone.
    pub load: BTreeMap<String, PodLoad>,
    /// Throughput mode: another group of the pool is deciding its load
    /// moves; this plan makes only required moves and the group is woken
    /// when that group is done.
    pub turn_taken_by: Option<String>,
    /// The pool-wide balance the group is part of (`status.poolBalance`).
    pub balance: Option<PoolBalanceStatus>,
}

/// One pool of a balance, as the deals see it.
#[derive(Debug, Clone, Copy)]
pub struct PoolPods<'a> {
    /// The pool.
    pub pool: &'a ConsumerPool,
    /// The pods it selects (as an observation holds them).
    pub pods: &'a [PodInfo],
    /// Pods away that it waits for, dealt to as if they were here
    /// ([`crate::identity`]).
    pub returning: &'a BTreeMap<String, Returning>,
}

/// A group's share, and the other groups a new deal concerns (their rows
/// changed, or they hold shards or slots on a pod the deal no longer has):
/// they must plan again (a pod event wakes them anyway, and the operator
/// reconciles them before the others of the pool; a group that joined,
/// left or changed its shard count wakes nobody else).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shared {
    /// The group's share.
    pub share: PoolShare,
    /// Groups to wake.
    pub changed: Vec<String>,
}

/// One balance's deals and turn.
#[derive(Debug, Clone, Default)]
pub struct PoolBook {
    count: DealBook,
    standby: DealBook,
    /// Each group's readable shards as its own observation counted them
    /// (fresher than its document for its peers): a group whose count
    /// changed deals with its new count at once, and its peers deal with
    /// the same count before its next document is out.
    reported: BTreeMap<String, u64>,
    turn: Turn,
    /// The throughput groups of the last share asked (woken when one moved
    /// shards).
    throughput: Vec<String>,
    /// The groups with standbys of the last share asked, and those of them
    /// whose slots their owners place (when one of those moved shards,
    /// the others' slots are dealt again around its new slots).
    standby_members: Vec<String>,
    forced_standbys: Vec<String>,
}

impl PoolBook {
    /// The share of `group` in the balance of `pools` (its own pool and
    /// those sharing pods with it) over `peers` (every group of those
    /// pools, `group` among them with what its own observation shows) at
    /// `now`.
    pub fn share(
        &mut self,
        group: &str,
        pools: &[PoolPods<'_>],
        mut peers: Vec<Peer>,
        now: Timestamp,
    ) -> Shared {
        peers.sort_by(|a, b| a.group.cmp(&b.group));
        self.reported
            .retain(|name, _| peers.iter().any(|p| &p.group == name));
        for peer in &mut peers {
            if peer.group == group {
                self.reported.insert(peer.group.clone(), peer.readable);
            } else if let Some(&readable) = self.reported.get(&peer.group) {
                peer.readable = readable;
            }
        }
        let Some(own) = peers.iter().find(|p| p.group == group).cloned() else {
            return Shared::default();
        };
        let mut eligible: Vec<(String, Vec<crate::engine::Pod>, u32)> = pools
            .iter()
            .map(|p| {
                let pods = crate::plan::engine_pods(p.pods, p.pool, p.returning, now)
                    .into_iter()
                    .filter(|pod| pod.ready && !pod.terminating)
                    .collect();
                let name = p.pool.metadata.name.clone().unwrap_or_default();
                (name, pods, p.pool.spec.max_shards_per_pod.unwrap_or(0))
            })
            .collect();
        eligible.sort_by(|a, b| a.0.cmp(&b.0));
        let pool_size = |pool: &str| {
            eligible
                .iter()
                .find(|(p, _, _)| p == pool)
                .map_or(0, |(_, pods, _)| pods.len() as u64)
        };
        let document = |name: &str| {
            peers
                .iter()
                .find(|p| p.group == name)
                .and_then(|p| p.document.clone())
        };

        // Count mode: the ⌈⌉ quotas.
        let count_groups: Vec<(String, String, u64)> = peers
            .iter()
            .filter(|p| p.balance.counts_shards())
            .map(|p| (p.group.clone(), p.pool.clone(), p.readable))
            .collect();
        let count_members = count_groups.len();
        let count = self.count.row(
            group,
            DealtFrom {
                pools: eligible.clone(),
                groups: count_groups,
                forced: Vec::new(),
            },
            |name| document(name).map(|d| holdings_in(&d)).unwrap_or_default(),
        );

        // Standby slots, over the groups with standbys.
        let per_shard = |p: &Peer| u64::from(p.standbys).min(pool_size(&p.pool).saturating_sub(1));
        let standby_groups: Vec<(String, String, u64)> = peers
            .iter()
            .filter(|p| per_shard(p) > 0)
            .map(|p| (p.group.clone(), p.pool.clone(), p.readable * per_shard(p)))
            .collect();
        let standby_members = standby_groups.len();
        // A group whose standbys take every pod but a shard's owner has its
        // slots where its owners are not, whatever its row: the others'
        // slots are dealt around where they are.
        let forced: Vec<(String, BTreeMap<String, u64>)> = peers
            .iter()
            .filter(|p| per_shard(p) > 0 && per_shard(p) + 1 == pool_size(&p.pool))
            .map(|p| {
                let slots = document(&p.group)
                    .map(|d| standby_holdings_in(&d))
                    .unwrap_or_default();
                (p.group.clone(), slots)
            })
            .collect();
        self.standby_members = standby_groups.iter().map(|(g, _, _)| g.clone()).collect();
        self.forced_standbys = forced.iter().map(|(g, _)| g.clone()).collect();
        let standby_pools = eligible
            .iter()
            .map(|(name, pods, _)| (name.clone(), pods.clone(), 0))
            .collect();
        let standby = self.standby.row(
            group,
            DealtFrom {
                pools: standby_pools,
                groups: standby_groups,
                forced,
            },
            |name| {
                document(name)
                    .map(|d| standby_holdings_in(&d))
                    .unwrap_or_default()
            },
        );

        // Throughput: the others' load on each pod, one decider at a time.
        let throughput: Vec<&Peer> = peers.iter().filter(|p| p.balance.weighs_load()).collect();
        self.throughput = throughput.iter().map(|p| p.group.clone()).collect();
        let mut load = BTreeMap::new();
        let mut turn_taken_by = None;
        if own.balance.weighs_load() && throughput.len() > 1 && !own.loads.is_empty() {
            let mut loads = PoolLoads::default();
            for peer in &throughput {
                let owners = peer
                    .document
                    .as_deref()
                    .map(peer::owners_in)
                    .unwrap_or_default();
                let owners = owners.iter().map(|(s, p)| (s.as_str(), p.as_str()));
                loads.add(&peer.group, owners, &peer.loads);
            }
            load = loads.others(group);
            turn_taken_by = self.turn.take(group, now);
        }

        let mut changed = count.changed;
        for name in standby.changed {
            if !changed.contains(&name) {
                changed.push(name);
            }
        }
        if count.dealt || standby.dealt {
            // A group whose row is the same must still plan again when it
            // holds shards or slots on a pod the deal no longer has (a row
            // lists the pods of ⌈⌉ quotas only: 56 shards on 8 pods or on 7
            // have none).
            let here: BTreeSet<&str> = eligible
                .iter()
                .flat_map(|(_, pods, _)| pods.iter().map(|p| p.name.as_str()))
                .collect();
            for peer in &peers {
                if peer.group != group
                    && !changed.contains(&peer.group)
                    && peer
                        .document
                        .as_deref()
                        .is_some_and(|doc| peer::holds_outside(doc, &here))
                {
                    changed.push(peer.group.clone());
                }
            }
        }
        let by_mode = if own.balance.counts_shards() && count.pods.is_some() {
            count_members
        } else if own.balance.weighs_load() && throughput.len() > 1 {
            throughput.len()
        } else {
            1
        };
        let standby_groups = if standby.pods.is_some() {
            standby_members
        } else {
            0
        };
        let balance = (by_mode > 1 || standby_groups > 1).then(|| PoolBalanceStatus {
            pools: eligible.iter().map(|(name, _, _)| name.clone()).collect(),
            groups: u32::try_from(by_mode).unwrap_or(u32::MAX),
            standby_groups: u32::try_from(standby_groups).unwrap_or(u32::MAX),
        });
        Shared {
            share: PoolShare {
                ceilings: count.pods,
                standby_ceilings: standby.pods,
                load,
                turn_taken_by,
                balance,
            },
            changed,
        }
    }

    /// `group`'s reconcile is over, and it `moved` shards (or not): gives
    /// its turn back. The groups to wake: those that waited for the turn,
    /// and, when it moved shards, the pool's other throughput groups (the
    /// load on the pods changed under them) and, when its owners place its
    /// standby slots, the other groups with standbys (their slots are
    /// dealt again around its new ones when one of them asks).
    pub fn done(&mut self, group: &str, moved: bool) -> Vec<String> {
        let mut wake = self.turn.give_back(group);
        let mut peers_of = |members: &[String]| {
            if moved && members.iter().any(|g| g == group) {
                for peer in members {
                    if peer != group && !wake.contains(peer) {
                        wake.push(peer.clone());
                    }
                }
            }
        };
        peers_of(&self.throughput);
        if self.forced_standbys.iter().any(|g| g == group) {
            peers_of(&self.standby_members);
        }
        wake
    }

    /// `group` left the balance (deleted, or moved to another pool): its
    /// turn is free again; the groups to wake.
    pub fn forget(&mut self, group: &str) -> Vec<String> {
        self.reported.remove(group);
        self.turn.forget(group)
    }
}
