//! The deal: which pods take each ShardGroup's ⌈⌉ quotas (or standby
//! slots) when several groups share one pool's pods.
//!
//! Planned alone, every group gives its ⌈S/P⌉ quotas to the same pods (the
//! most recently ready), so the extras of every group pile up there. Here
//! the groups of a pool are dealt together: group g splits its `readable`
//! shards into ⌊share⌋ floors ([`crate::quota::shares`]) and `r_g` extra
//! units, each to a distinct pod with a remainder; a pod's share of the
//! extras over all groups is `F_p = Σ_g remainder_gp / denominator_g`, and
//! every pod gets ⌊F_p⌋ or ⌈F_p⌉ of them. Both at once are always possible
//! (rounding a matrix with integral row sums: the bipartite flow of groups to
//! pods with pod bounds ⌊F_p⌋..⌈F_p⌉ is feasible), so each group keeps
//! max − min ≤ 1 of its own and every pod's total over the pool is within
//! one shard of its capacity-weighted share. With equal capacities and no
//! cap that is max − min ≤ 1 over the pool.
//!
//! Stickiness: extras a pod already holds (it holds more than its floor in
//! that group: keeping the ⌈⌉ there saves a move) are kept first, then the
//! pool's previous choice, then the most recently ready pod (a rolling
//! deploy replaces the oldest first). The deal is:
//! 1. keep: every holder, then a pod over ⌈F_p⌉ gives up the extras of the
//!    groups with the fewest vacancies (so the vacancies spread out), and a
//!    holder left out keeps its extra when a free chain makes room;
//! 2. fill: per group, the pods furthest below ⌊F_p⌋ first (an augmenting
//!    path through other groups when every candidate is full);
//! 3. lift: a pod still below ⌊F_p⌋ takes an extra from a pod above its own
//!    bound, through a chain of groups when no single group links them.
//!
//! A pool at rest (each group's holders are a valid deal) is returned as it
//! is, so a re-deal of the result changes nothing.
//!
//! A `fixed` group's units are not the deal's to place (see
//! [`PoolGroup::fixed`]): its holders keep its extras, and no step takes
//! one from them; the others are dealt around them, within the bounds
//! where they allow it.

use std::cmp::Reverse;
use std::collections::VecDeque;

use xxhash_rust::xxh3::xxh3_64;

use super::{Ceilings, PoolGroup, PoolInput};
use crate::quota::{Shares, shares};
use crate::types::Pod;

/// Deals the ⌈⌉ quotas of every group of `input` (see the module header).
pub fn deal(input: &PoolInput) -> Ceilings {
    let mut pods: Vec<&Pod> = input
        .pods
        .iter()
        .filter(|p| p.ready && !p.terminating)
        .collect();
    pods.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    pods.dedup_by(|a, b| a.name == b.name);
    let mut groups: Vec<&PoolGroup> = input.groups.iter().collect();
    groups.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let deal = Deal::new(&pods, &groups, input.max_shards_per_pod);
    let chosen = deal.run();
    groups
        .iter()
        .zip(chosen)
        .map(|(group, members)| {
            let names = members.iter().map(|&p| pods[p].name.clone()).collect();
            (group.name.clone(), names)
        })
        .collect()
}

/// Per pod and group: whether the pod takes the group's ⌈⌉ quota.
struct Deal {
    pods: usize,
    /// Per group: its shares over the pods.
    shares: Vec<Shares>,
    /// Per group and pod: it holds more than its floor now.
    holds: Vec<Vec<bool>>,
    /// Per group and pod: the previous deal gave it the ⌈⌉.
    previous: Vec<Vec<bool>>,
    /// Per group: its holders keep its extras, whatever the bounds.
    fixed: Vec<bool>,
    /// Per pod: the fewest and most extras it may take over the pool.
    low: Vec<u64>,
    high: Vec<u64>,
    /// Per pod: tie-break rank, lowest first (most recently ready, then hash).
    rank: Vec<usize>,
}

/// The deal's state: members per group, extras per pod.
struct Dealt {
    member: Vec<Vec<bool>>,
    count: Vec<usize>,
    extras: Vec<u64>,
}

impl Dealt {
    fn give(&mut self, g: usize, p: usize) {
        debug_assert!(!self.member[g][p]);
        self.member[g][p] = true;
        self.count[g] += 1;
        self.extras[p] += 1;
    }
    fn take(&mut self, g: usize, p: usize) {
        debug_assert!(self.member[g][p]);
        self.member[g][p] = false;
        self.count[g] -= 1;
        self.extras[p] -= 1;
    }
}

/// Fractions of an extra unit, in 2^-64ths.
const ONE: u128 = 1 << 64;

impl Deal {
    fn new(pods: &[&Pod], groups: &[&PoolGroup], cap: u32) -> Self {
        let n = pods.len();
        let index = |name: &str| pods.binary_search_by(|p| p.name.as_str().cmp(name)).ok();
        let all: Vec<u64> = pods.iter().map(|p| u64::from(p.capacity.max(1))).collect();
        // A group splits its shards over its own pool's pods only: the
        // others weigh nothing for it (no floor, never a candidate).
        let weights = |group: &PoolGroup| -> Vec<u64> {
            let Some(own) = &group.pods else {
                return all.clone();
            };
            let mut weights = vec![0u64; n];
            for pod in own.iter().filter(|p| p.ready && !p.terminating) {
                if let Some(p) = index(&pod.name) {
                    weights[p] = u64::from(pod.capacity.max(1));
                }
            }
            weights
        };
        let shares: Vec<Shares> = groups
            .iter()
            .map(|g| {
                let cap = g.max_shards_per_pod.unwrap_or(cap);
                shares(g.readable, &weights(g), u64::from(cap))
            })
            .collect();
        let holds = groups
            .iter()
            .zip(&shares)
            .map(|(group, share)| {
                let mut holds = vec![false; n];
                for (pod, &held) in &group.holdings {
                    if let Some(p) = index(pod) {
                        holds[p] = held > share.floor[p];
                    }
                }
                holds
            })
            .collect();
        let previous = groups
            .iter()
            .map(|group| {
                let mut previous = vec![false; n];
                for pod in &group.previous {
                    if let Some(p) = index(pod) {
                        previous[p] = true;
                    }
                }
                previous
            })
            .collect();
        // Σ_g remainder / denominator per pod, in 2^-64ths: each term is
        // rounded down by less than one unit, so a sum within `groups` units
        // below an integer is that integer.
        let (mut low, mut high) = (vec![0u64; n], vec![0u64; n]);
        for p in 0..n {
            let sum: u128 = shares
                .iter()
                .filter(|s| s.denominator > 0)
                .map(|s| (s.remainder[p] << 64) / s.denominator)
                .sum();
            let slack = groups.len() as u128;
            let whole = u64::try_from(sum >> 64).unwrap_or(u64::MAX);
            let fraction = sum & (ONE - 1);
            (low[p], high[p]) = if fraction == 0 {
                (whole, whole)
            } else if fraction + slack >= ONE {
                (whole + 1, whole + 1)
            } else {
                (whole, whole + 1)
            };
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by_key(|&p| {
            (
                Reverse(pods[p].ready_since),
                xxh3_64(pods[p].name.as_bytes()),
                p,
            )
        });
        let mut rank = vec![0usize; n];
        for (at, &p) in order.iter().enumerate() {
            rank[p] = at;
        }
        Self {
            pods: n,
            shares,
            holds,
            previous,
            fixed: groups.iter().map(|g| g.fixed).collect(),
            low,
            high,
            rank,
        }
    }

    fn need(&self, g: usize) -> usize {
        usize::try_from(self.shares[g].extra).unwrap_or(usize::MAX)
    }

    fn candidate(&self, g: usize, p: usize) -> bool {
        self.shares[g].may_take_extra(p)
    }

    /// Whether the deal may move group `g`'s extras.
    fn movable(&self, g: usize) -> bool {
        !self.fixed[g]
    }

    /// Keep, fill, lift (module header); the members of each group.
    fn run(&self) -> Vec<Vec<usize>> {
        let groups = self.shares.len();
        let mut dealt = Dealt {
            member: vec![vec![false; self.pods]; groups],
            count: vec![0; groups],
            extras: vec![0; self.pods],
        };
        // Every holder keeps its extra (up to each group's need); then a pod
        // over its high bound gives up, one at a time, the extra of the
        // group with the fewest vacancies so far, so that the groups left
        // short are spread out and the pods with room can fill them (a
        // group dropped by two pods needs two pods with room).
        for g in 0..groups {
            let mut holders: Vec<usize> = (0..self.pods)
                .filter(|&p| self.candidate(g, p) && self.holds[g][p])
                .collect();
            holders.sort_by_key(|&p| {
                (
                    Reverse(self.high[p] - self.low[p]),
                    !self.previous[g][p],
                    self.rank[p],
                )
            });
            for p in holders.into_iter().take(self.need(g)) {
                dealt.give(g, p);
            }
        }
        let mut over: Vec<usize> = (0..self.pods)
            .filter(|&p| dealt.extras[p] > self.high[p])
            .collect();
        // The oldest give up first.
        over.sort_by_key(|&p| Reverse(self.rank[p]));
        for p in over {
            while dealt.extras[p] > self.high[p] {
                let drop = (0..groups)
                    .filter(|&g| dealt.member[g][p] && self.movable(g))
                    .min_by_key(|&g| (self.need(g) - dealt.count[g], self.previous[g][p], g));
                let Some(g) = drop else { break };
                dealt.take(g, p);
            }
        }
        // A holder left out because it was full keeps its extra when a free
        // chain (moving extras that are not held, or onto pods that hold
        // them) makes room: the keep is then as large as it can be, not
        // only as large as the groups' order allowed.
        for g in 0..groups {
            for p in 0..self.pods {
                if dealt.count[g] >= self.need(g) {
                    break;
                }
                if !self.candidate(g, p) || !self.holds[g][p] || dealt.member[g][p] {
                    continue;
                }
                let room = |w: usize, d: &Dealt| d.extras[w] < self.high[w];
                if let Some((end, 0, via)) = self.search(&[p], &dealt, room, true) {
                    self.apply(end, &via, &mut dealt);
                    dealt.give(g, p);
                }
            }
        }
        for g in 0..groups {
            while dealt.count[g] < self.need(g) {
                if !self.fill_one(g, &mut dealt) {
                    break;
                }
            }
        }
        for p in 0..self.pods {
            while dealt.extras[p] < self.low[p] {
                if !self.lift(p, &mut dealt) {
                    break;
                }
            }
        }
        self.improve(&mut dealt);
        dealt
            .member
            .iter()
            .map(|members| (0..self.pods).filter(|&p| members[p]).collect())
            .collect()
    }

    /// Trades extras a pod holds for ones it does not, while a trade saves
    /// a move: in group h, a member x that does not hold more than its
    /// floor gives the extra to a holder y outside, and a chain of free
    /// trades through other groups brings y back under its bound (or x back
    /// to its own). Keep and fill decide group by group, so one group can
    /// lose two holders where two groups losing one each would do; this
    /// repairs that. A deal with no such pair (a pool at rest) is left as
    /// it is after one scan. Each trade saves a move, so it ends.
    fn improve(&self, dealt: &mut Dealt) {
        let mut improved = true;
        while improved {
            improved = false;
            for h in (0..self.shares.len()).filter(|&h| self.movable(h)) {
                for x in 0..self.pods {
                    if !dealt.member[h][x] || self.holds[h][x] {
                        continue;
                    }
                    for y in 0..self.pods {
                        let regret =
                            self.holds[h][y] && !dealt.member[h][y] && self.candidate(h, y);
                        if regret && self.trade(h, x, y, dealt) {
                            improved = true;
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Group h's extra goes from x to y, if free chains keep every pod
    /// within its bounds; otherwise nothing changes.
    fn trade(&self, h: usize, x: usize, y: usize, dealt: &mut Dealt) -> bool {
        dealt.take(h, x);
        dealt.give(h, y);
        let within =
            |p: usize, d: &Dealt| d.extras[p] >= self.low[p] && d.extras[p] <= self.high[p];
        if within(x, dealt) && within(y, dealt) {
            return true;
        }
        if dealt.extras[y] > self.high[y] {
            // y sheds one along a free chain, to x or to a pod with room.
            let x_low = dealt.extras[x] < self.low[x];
            let found = self.search(
                &[y],
                dealt,
                |w, d| d.extras[w] < self.high[w] && (!x_low || w == x),
                true,
            );
            if let Some((end, 0, via)) = found {
                self.apply(end, &via, dealt);
                return true;
            }
        } else if dealt.extras[x] < self.low[x] {
            // x takes one back along a free chain from a pod above its bound.
            let found = self.search(
                &[x],
                dealt,
                |w, d| w != x && d.extras[w] > self.low[w],
                false,
            );
            if let Some((end, 0, via)) = found {
                self.apply(end, &via, dealt);
                return true;
            }
        }
        dealt.take(h, y);
        dealt.give(h, x);
        false
    }

    /// Gives group `g` one more member: the candidate with room furthest
    /// below its low bound, or, when every candidate is full, along an
    /// augmenting path that moves another group's extra off a full pod.
    fn fill_one(&self, g: usize, dealt: &mut Dealt) -> bool {
        let open = (0..self.pods)
            .filter(|&p| {
                self.candidate(g, p) && !dealt.member[g][p] && dealt.extras[p] < self.high[p]
            })
            .min_by_key(|&p| {
                let below = i128::from(dealt.extras[p]) - i128::from(self.low[p]);
                (below, !self.previous[g][p], self.rank[p])
            });
        if let Some(p) = open {
            dealt.give(g, p);
            return true;
        }
        // Breadth-first over full pods: `via[y] = (group, x)` means group
        // moves its extra from x to y.
        let starts: Vec<usize> = (0..self.pods)
            .filter(|&p| self.candidate(g, p) && !dealt.member[g][p])
            .collect();
        let Some((end, _, via)) = self.search(
            &starts,
            dealt,
            |y, dealt| dealt.extras[y] < self.high[y],
            true,
        ) else {
            return false;
        };
        let start = self.start_of(end, &via);
        self.apply(end, &via, dealt);
        dealt.give(g, start);
        true
    }

    /// Gives pod `d` one more extra, from a pod above its low bound, along
    /// a chain of groups: group h moves its extra from x to the pod before.
    fn lift(&self, d: usize, dealt: &mut Dealt) -> bool {
        let Some((end, _, via)) = self.search(
            &[d],
            dealt,
            |x, dealt| x != d && dealt.extras[x] > self.low[x],
            false,
        ) else {
            return false;
        };
        self.apply(end, &via, dealt);
        true
    }

    /// Cheapest-path search from `starts` (0-1 breadth-first: a step costs
    /// one move when it takes an extra from a pod that holds it, for a pod
    /// that does not). `forward`: from pod x (which would be over its
    /// bound) to pod y through a group h holding x's extra that y may take
    /// (h moves it x → y), until `done(y)`. Backward (`!forward`): from pod
    /// y (which wants one) to pod x through a group h that y may take and x
    /// holds, until `done(x)`. Returns the last pod, the path's cost and,
    /// per pod reached, the group and pod it was reached from.
    #[allow(clippy::type_complexity)]
    fn search(
        &self,
        starts: &[usize],
        dealt: &Dealt,
        done: impl Fn(usize, &Dealt) -> bool,
        forward: bool,
    ) -> Option<(usize, usize, Vec<Option<(usize, usize)>>)> {
        let mut via: Vec<Option<(usize, usize)>> = vec![None; self.pods];
        let mut cost = vec![usize::MAX; self.pods];
        let mut settled = vec![false; self.pods];
        let mut queue = VecDeque::new();
        for &s in starts {
            cost[s] = 0;
            queue.push_back(s);
        }
        // Oldest pods give up extras first; the youngest take them first.
        let mut order: Vec<usize> = (0..self.pods).collect();
        order.sort_by_key(|&p| {
            if forward {
                self.rank[p]
            } else {
                usize::MAX - self.rank[p]
            }
        });
        while let Some(at) = queue.pop_front() {
            if settled[at] {
                continue;
            }
            settled[at] = true;
            if !starts.contains(&at) && done(at, dealt) {
                return Some((at, cost[at], via));
            }
            for &other in &order {
                if settled[other] {
                    continue;
                }
                for h in 0..self.shares.len() {
                    let (from, to) = if forward { (at, other) } else { (other, at) };
                    let linked = self.movable(h)
                        && dealt.member[h][from]
                        && !dealt.member[h][to]
                        && self.candidate(h, to);
                    if !linked {
                        continue;
                    }
                    let step = usize::from(self.holds[h][from] && !self.holds[h][to]);
                    if cost[at] + step < cost[other] {
                        cost[other] = cost[at] + step;
                        via[other] = Some((h, at));
                        if step == 0 {
                            queue.push_front(other);
                        } else {
                            queue.push_back(other);
                        }
                    }
                }
            }
        }
        None
    }

    /// Applies the chain that ends at `end`: each step moves a group's
    /// extra between two pods (forward: from the earlier pod to the later;
    /// backward: from the later to the earlier, see [`Self::search`]).
    fn apply(&self, end: usize, via: &[Option<(usize, usize)>], dealt: &mut Dealt) {
        let mut at = end;
        while let Some((h, from)) = via[at] {
            if dealt.member[h][from] && !dealt.member[h][at] {
                dealt.take(h, from);
                dealt.give(h, at);
            } else {
                dealt.take(h, at);
                dealt.give(h, from);
            }
            at = from;
        }
    }

    /// The pod the chain ending at `end` starts from.
    fn start_of(&self, end: usize, via: &[Option<(usize, usize)>]) -> usize {
        let mut at = end;
        while let Some((_, from)) = via[at] {
            at = from;
        }
        at
    }
}
