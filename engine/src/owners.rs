//! Owner placement: who reads each readable shard.
//!
//! 1. Quotas bound every pod's load (count mode: ⌊S/P⌋ or ⌈S/P⌉ weighted by
//!    capacity, see [`crate::quota`]; hashRange mode: the pod's fair share of
//!    the key space).
//! 2. Stickiness: every shard whose previous owner is eligible stays, unless
//!    that pod is over its cap (a required move) or over its quota (an
//!    optional move, limited by the optional-move budget; `requiredOnly` is a
//!    budget of zero). An over-full pod keeps the shards with the lowest
//!    rendezvous score `mix(shardHash ^ podHash)`, so which shards leave is
//!    deterministic and spread across the key space.
//! 3. Children without a previous owner go to a parent's previous owner when
//!    that pod is under quota.
//! 4. Everything else walks the ring from its hash to the first pod with room
//!    (hashRange: heaviest shards first, to the first pod under its fair
//!    share that the shard leaves at most half a shard above it, else the
//!    pod furthest below its share). A pod keeps its sticky shards, lightest first, while
//!    it is under its fair share, so no pod ends more than one shard's weight
//!    above it and a re-plan of a plan's result changes nothing.
//!
//! Count mode moves exactly the lower bound: orphans plus the excess over
//! quota, where the ⌈⌉ quotas went to the pods that already held the most.
//! Throughput mode has its own placement ([`crate::throughput`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::hash::mix;
use crate::model::{Class, Model, NONE, index};
use crate::quota::apportion_preferring;
use crate::ring::{Ring, Walker};
use crate::types::{Balance, PlanOptions, Rebalance};

/// A weight·capacity product as a signed distance. It exceeds `i128::MAX`
/// only when hash ranges overlap far beyond the key space; saturating keeps
/// the comparisons ordered where a wrapping cast would flip the sign.
fn signed(x: u128) -> i128 {
    i128::try_from(x).unwrap_or(i128::MAX)
}

/// Ring points a hashRange placement inspects for a pod that fits before
/// taking the pod furthest below its fair share.
pub const FIT_CANDIDATES: usize = 32;

/// Why a shard left an eligible previous owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// It did not (it stayed, or its previous owner is gone).
    No,
    /// The pod is over `maxShardsPerPod`.
    Required,
    /// Balancing: the pod is over its quota.
    Optional,
}

/// Owner placement result, indexed like `Model::shards`.
pub struct Owners {
    /// Owner pod index, or `NONE` (pending, complete or unassigned).
    pub owner: Vec<u32>,
    /// Why the shard left its previous owner, when it did.
    pub release: Vec<Release>,
    /// Shards per eligible pod.
    pub loads: Vec<u64>,
    /// Throughput mode: how the load lies after the plan.
    pub throughput: Option<crate::types::ThroughputReport>,
}

/// Places every readable shard of `model`.
pub fn place(model: &Model<'_>, options: &PlanOptions, ring: &Ring) -> Owners {
    let budget = match options.rebalance {
        Rebalance::RequiredOnly => 0,
        Rebalance::All => options.max_optional_moves.map_or(u64::MAX, u64::from),
    };
    let cap = match options.max_shards_per_pod {
        0 => u64::MAX,
        cap => u64::from(cap),
    };
    let mut state = State {
        model,
        ring,
        owner: vec![NONE; model.shards.len()],
        release: vec![Release::No; model.shards.len()],
        loads: vec![0; model.pods.len()],
        cap,
    };
    if !model.pods.is_empty() {
        match options.balance {
            Balance::Count => state.count_mode(budget),
            Balance::HashRange => state.range_mode(budget),
            Balance::Throughput => return crate::throughput::place(model, options, budget, cap),
        }
    }
    Owners {
        owner: state.owner,
        release: state.release,
        loads: state.loads,
        throughput: None,
    }
}

struct State<'m, 'a> {
    model: &'m Model<'a>,
    ring: &'m Ring,
    owner: Vec<u32>,
    release: Vec<Release>,
    loads: Vec<u64>,
    cap: u64,
}

impl State<'_, '_> {
    /// Readable shards grouped by eligible previous owner (`bucket[start[p]..start[p+1]]`).
    fn sticky(&self) -> (Vec<usize>, Vec<u32>) {
        let p = self.model.pods.len();
        let mut start = vec![0usize; p + 1];
        for s in &self.model.shards {
            if s.class == Class::Readable && s.prev_owner != NONE {
                start[s.prev_owner as usize + 1] += 1;
            }
        }
        for i in 0..p {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut bucket = vec![0u32; start[p]];
        for (i, s) in self.model.shards.iter().enumerate() {
            if s.class == Class::Readable && s.prev_owner != NONE {
                let at = &mut fill[s.prev_owner as usize];
                bucket[*at] = index(i);
                *at += 1;
            }
        }
        (start, bucket)
    }

    fn count_mode(&mut self, budget: u64) {
        let model = self.model;
        let p = model.pods.len();
        let readable = model
            .shards
            .iter()
            .filter(|s| s.class == Class::Readable)
            .count() as u64;
        let (start, mut bucket) = self.sticky();
        let current: Vec<u64> = (0..p).map(|e| (start[e + 1] - start[e]) as u64).collect();
        let weights: Vec<u64> = model.pods.iter().map(|p| p.capacity).collect();
        // Ties for a ⌈⌉ quota go to the most recently ready pod, then by
        // hash: the pods a rolling deploy replaces next are the oldest.
        let tiebreak: Vec<(Reverse<i64>, u64)> = model
            .pods
            .iter()
            .map(|p| (Reverse(p.ready_since), p.hash))
            .collect();
        let cap = if self.cap == u64::MAX { 0 } else { self.cap };
        let quota = apportion_preferring(
            readable,
            &weights,
            cap,
            &current,
            &tiebreak,
            model.ceilings.as_deref(),
        );

        let required: Vec<u64> = current
            .iter()
            .map(|&c| c.saturating_sub(self.cap))
            .collect();
        let optional: Vec<u64> = (0..p)
            .map(|e| current[e].min(self.cap).saturating_sub(quota[e]))
            .collect();
        let granted = grant(&optional, budget);
        for e in 0..p {
            let slice = &mut bucket[start[e]..start[e + 1]];
            // Counts of this slice (a usize length) or less: saturating is never hit.
            let keep = usize::try_from(current[e] - required[e] - granted[e]).unwrap_or(usize::MAX);
            let granted_e = usize::try_from(granted[e]).unwrap_or(usize::MAX);
            if keep < slice.len() {
                let pod_hash = model.pods[e].hash;
                let shards = &model.shards;
                slice.sort_unstable_by_key(|&s| (mix(shards[s as usize].hash ^ pod_hash), s));
            }
            for (at, &s) in slice.iter().enumerate() {
                if at < keep {
                    self.owner[s as usize] = index(e);
                } else if at < keep + granted_e {
                    self.release[s as usize] = Release::Optional;
                } else {
                    self.release[s as usize] = Release::Required;
                }
            }
            self.loads[e] = keep as u64;
        }

        let mut free = self.free();
        free.sort_unstable_by_key(|&s| (model.shards[s as usize].hash, s));
        let has_room = |loads: &[u64], e: u32| loads[e as usize] < quota[e as usize];
        free.retain(|&s| !self.place_with_parent(s, &has_room));
        let mut walker = Walker::new(self.ring, p, |e| has_room(&self.loads, e));
        for s in free {
            let at = self.ring.start(model.shards[s as usize].hash);
            let Some(point) = walker.find(at) else { break };
            let e = self.ring.pod_at(point);
            self.assign(s, e);
            if !has_room(&self.loads, e) {
                walker.close(self.ring, e);
            }
        }
    }

    fn range_mode(&mut self, budget: u64) {
        let model = self.model;
        let p = model.pods.len();
        let total: u128 = model
            .shards
            .iter()
            .filter(|s| s.class == Class::Readable)
            .map(|s| u128::from(s.weight))
            .sum();
        let capacity: u128 = model.pods.iter().map(|p| u128::from(p.capacity)).sum();
        // Signed distance of a pod's weight above its fair share, scaled by
        // the total capacity so it stays integral: w·C − W·c.
        let over = |w: u128, e: usize| -> i128 {
            signed(w * capacity) - signed(total * u128::from(model.pods[e].capacity))
        };
        let mut wload = vec![0u128; p];
        let (start, mut bucket) = self.sticky();
        // Per pod, the optional releases in ascending weight (largest last).
        let mut optional: Vec<Vec<u32>> = vec![Vec::new(); p];
        for e in 0..p {
            let slice = &mut bucket[start[e]..start[e + 1]];
            let shards = &model.shards;
            let pod_hash = model.pods[e].hash;
            // Smallest first: keeping a maximal prefix that starts under the
            // fair share re-accepts a previous plan's result unchanged.
            slice.sort_unstable_by_key(|&s| {
                let rec = &shards[s as usize];
                (rec.weight, mix(rec.hash ^ pod_hash), s)
            });
            // A cap beyond usize (unlimited is u64::MAX) keeps the whole slice.
            let within_cap = slice
                .len()
                .min(usize::try_from(self.cap).unwrap_or(usize::MAX));
            for (at, &s) in slice.iter().enumerate() {
                if at >= within_cap {
                    self.release[s as usize] = Release::Required;
                } else if over(wload[e], e) < 0 {
                    self.owner[s as usize] = index(e);
                    self.loads[e] += 1;
                    wload[e] += u128::from(model.shards[s as usize].weight);
                } else {
                    optional[e].push(s);
                }
            }
        }
        // The budget releases from the most overloaded pods first; what it
        // cannot pay for stays where it is.
        let mut heap: BinaryHeap<(i128, Reverse<usize>)> = BinaryHeap::new();
        for (e, list) in optional.iter().enumerate() {
            if !list.is_empty() {
                let all: u128 = list
                    .iter()
                    .map(|&s| u128::from(model.shards[s as usize].weight))
                    .sum();
                heap.push((over(wload[e] + all, e), Reverse(e)));
            }
        }
        let mut left = budget;
        while let Some((excess, Reverse(e))) = heap.pop() {
            let Some(s) = optional[e].pop() else { continue };
            if left == 0 {
                optional[e].push(s);
                break;
            }
            left -= 1;
            self.release[s as usize] = Release::Optional;
            let w = u128::from(model.shards[s as usize].weight);
            if !optional[e].is_empty() {
                heap.push((excess.saturating_sub(signed(w * capacity)), Reverse(e)));
            }
        }
        for (e, list) in optional.iter().enumerate() {
            for &s in list {
                self.owner[s as usize] = index(e);
                self.loads[e] += 1;
                wload[e] += u128::from(model.shards[s as usize].weight);
            }
        }

        let mut free = self.free();
        free.sort_unstable_by_key(|&s| {
            let rec = &model.shards[s as usize];
            (Reverse(rec.weight), rec.hash, s)
        });
        let cap = self.cap;
        let room = |loads: &[u64], wload: &[u128], e: u32| {
            loads[e as usize] < cap && over(wload[e as usize], e as usize) < 0
        };
        let mut walker = Walker::new(self.ring, p, |e| room(&self.loads, &wload, e));
        let mut roomiest =
            Roomiest::new((0..index(p)).map(|e| (over(wload[e as usize], e as usize), e)));
        for s in free {
            let rec = &model.shards[s as usize];
            let w = u128::from(rec.weight);
            // A pod fits a shard when taking it ends at most half the shard
            // past its fair share (with equal weights: ⌊⌋/⌈⌉ shards).
            let fits = |wload: &[u128], e: usize| 2 * over(wload[e] + w, e) <= signed(w * capacity);
            let parent = self.parent_owner(s, &|loads, e| {
                room(loads, &wload, e) && fits(&wload, e as usize)
            });
            let target = if parent != NONE {
                Some(parent)
            } else if let Some(e) = self
                .fitting(&mut walker, rec.hash, |e| fits(&wload, e as usize))
                .or_else(|| {
                    // Nothing near fits: the pod furthest below its share.
                    roomiest.best(|e| {
                        walker
                            .is_open(e)
                            .then(|| over(wload[e as usize], e as usize))
                    })
                })
            {
                Some(e)
            } else {
                // No pod under its fair share has count room (only possible
                // with a cap): the least overloaded pod under the cap.
                (0..p)
                    .filter(|&e| self.loads[e] < cap)
                    .min_by_key(|&e| (over(wload[e], e), e))
                    .map(index)
            };
            let Some(e) = target else { break };
            self.assign(s, e);
            wload[e as usize] += w;
            if !room(&self.loads, &wload, e) {
                walker.close(self.ring, e);
            }
        }
    }

    /// Walks the ring from `hash` over open pods (under their fair share) to
    /// the first that `fits`, giving up after [`FIT_CANDIDATES`] misses.
    fn fitting(&self, walker: &mut Walker, hash: u64, fits: impl Fn(u32) -> bool) -> Option<u32> {
        let mut at = walker.find(self.ring.start(hash));
        for _ in 0..FIT_CANDIDATES {
            let e = self.ring.pod_at(at?);
            if fits(e) {
                return Some(e);
            }
            at = walker.find((at? + 1) % self.ring.len());
        }
        None
    }

    /// Readable shards without an owner yet, in model order.
    fn free(&self) -> Vec<u32> {
        (0..index(self.model.shards.len()))
            .filter(|&s| {
                self.model.shards[s as usize].class == Class::Readable
                    && self.owner[s as usize] == NONE
            })
            .collect()
    }

    /// A new child's preferred pod: the least-loaded previous owner of one of
    /// its parents that still has room, or `NONE`.
    fn parent_owner(&self, s: u32, has_room: &dyn Fn(&[u64], u32) -> bool) -> u32 {
        let rec = &self.model.shards[s as usize];
        if rec.previous.is_some() || rec.parents.is_empty() {
            return NONE;
        }
        rec.parents
            .iter()
            .map(|&parent| self.model.shards[parent as usize].prev_owner)
            .filter(|&e| e != NONE && has_room(&self.loads, e))
            .min_by_key(|&e| (self.loads[e as usize], e))
            .unwrap_or(NONE)
    }

    /// Places a new child on its parent's owner when that keeps the balance.
    fn place_with_parent(&mut self, s: u32, has_room: &dyn Fn(&[u64], u32) -> bool) -> bool {
        let e = self.parent_owner(s, has_room);
        if e == NONE {
            return false;
        }
        self.assign(s, e);
        true
    }

    fn assign(&mut self, s: u32, e: u32) {
        self.owner[s as usize] = e;
        self.loads[e as usize] += 1;
    }
}

/// The open pod furthest below its fair share, kept in a heap whose stale
/// entries are refreshed lazily (a pod's excess only grows during placement).
struct Roomiest {
    heap: BinaryHeap<Reverse<(i128, u32)>>,
}

impl Roomiest {
    fn new(pods: impl Iterator<Item = (i128, u32)>) -> Self {
        Roomiest {
            heap: pods.map(Reverse).collect(),
        }
    }

    /// `current(pod)` is the pod's excess now, or `None` once it is closed.
    fn best(&mut self, current: impl Fn(u32) -> Option<i128>) -> Option<u32> {
        while let Some(&Reverse((was, e))) = self.heap.peek() {
            match current(e) {
                Some(now) if now == was => return Some(e),
                Some(now) => {
                    self.heap.pop();
                    self.heap.push(Reverse((now, e)));
                }
                None => {
                    self.heap.pop();
                }
            }
        }
        None
    }
}

/// Splits an optional-move `budget` over pods by their `excess`, always
/// taking from the pod with the most excess left (ties: lowest index).
fn grant(excess: &[u64], budget: u64) -> Vec<u64> {
    let total: u64 = excess.iter().sum();
    if total <= budget {
        return excess.to_vec();
    }
    let mut granted = vec![0u64; excess.len()];
    let mut heap: BinaryHeap<(u64, Reverse<usize>)> = excess
        .iter()
        .enumerate()
        .filter(|(_, x)| **x > 0)
        .map(|(i, &x)| (x, Reverse(i)))
        .collect();
    for _ in 0..budget {
        let Some((x, Reverse(i))) = heap.pop() else {
            break;
        };
        granted[i] += 1;
        if x > 1 {
            heap.push((x - 1, Reverse(i)));
        }
    }
    granted
}

#[cfg(test)]
mod tests {
    use super::grant;

    #[test]
    fn grant_takes_from_the_fullest() {
        assert_eq!(grant(&[3, 1, 0], 10), vec![3, 1, 0]);
        assert_eq!(grant(&[3, 1, 0], 2), vec![2, 0, 0]);
        assert_eq!(grant(&[2, 2, 1], 3), vec![2, 1, 0]);
        assert_eq!(grant(&[2, 2], 0), vec![0, 0]);
    }
}
