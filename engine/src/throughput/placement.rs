//! [`Placement`]: the tentative placement the passes of the throughput mode
//! work on (owners, loads and noise per pod), and how it places a shard on
//! the lightest pod of its class.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use crate::hash::mix;
use crate::model::{Class, Model, NONE, index};
use crate::owners::Release;

/// The tentative placement the passes work on, indexed like the model.
pub(crate) struct Placement<'m, 'a> {
    pub(crate) model: &'m Model<'a>,
    /// Owner pod index per shard, or `NONE`.
    pub(crate) owner: Vec<u32>,
    /// Why a shard left its eligible previous owner.
    pub(crate) release: Vec<Release>,
    /// Sum of the weights of each pod's shards.
    pub(crate) load: Vec<f64>,
    /// Sum of the squared noise of each pod's shards.
    pub(crate) var: Vec<f64>,
    /// Each pod's shards (unordered).
    pub(crate) members: Vec<Vec<u32>>,
    /// Each pod's capacity weight.
    pub(crate) capacity: Vec<f64>,
    /// Most shards per pod (`u64::MAX`: no cap).
    pub(crate) cap: u64,
    /// Pods that recent load shifts pushed away from their fair share
    /// ([`super::fair::pushed`], taken before the repair).
    pub(crate) pushed: Vec<bool>,
    /// Each pod's heaviest shard of the pool's other groups (0 without
    /// them): their load is in `load` and `var` from the start, fixed.
    pub(crate) pool_heaviest: Vec<f64>,
}

impl<'m, 'a> Placement<'m, 'a> {
    /// An empty placement of `model`: each pod carries only the load of the
    /// pool's other groups (none when the group is balanced alone).
    pub(super) fn new(model: &'m Model<'a>, cap: u64) -> Self {
        let p = model.pods.len();
        let pool = |f: fn(&crate::types::PodLoad) -> f64| -> Vec<f64> {
            if model.pool_load.is_empty() {
                vec![0.0; p]
            } else {
                model.pool_load.iter().map(f).collect()
            }
        };
        Self {
            model,
            owner: vec![NONE; model.shards.len()],
            release: vec![Release::No; model.shards.len()],
            load: pool(|l| l.rate as f64),
            var: pool(|l| (l.noise as f64) * (l.noise as f64)),
            members: vec![Vec::new(); p],
            capacity: model.pods.iter().map(|pod| pod.capacity as f64).collect(),
            cap,
            pushed: vec![false; p],
            pool_heaviest: pool(|l| l.heaviest as f64),
        }
    }

    /// Each pod's heaviest shard by `weight`, the pool's other groups'
    /// included.
    pub(crate) fn heaviest(&self, weight: impl Fn(u32) -> f64) -> Vec<f64> {
        self.members
            .iter()
            .zip(&self.pool_heaviest)
            .map(|(list, &pool)| list.iter().map(|&s| weight(s)).fold(pool, f64::max))
            .collect()
    }

    /// Shard `s`'s weight (bytes per second).
    pub(crate) fn weight(&self, s: u32) -> f64 {
        self.model.shards[s as usize].weight as f64
    }

    /// Shard `s`'s squared noise.
    pub(crate) fn noise_sq(&self, s: u32) -> f64 {
        let noise = self.model.shards[s as usize].noise as f64;
        noise * noise
    }

    /// Whether pod `e` may take one more shard.
    pub(crate) fn has_room(&self, e: u32) -> bool {
        (self.members[e as usize].len() as u64) < self.cap
    }

    pub(crate) fn assign(&mut self, s: u32, e: u32) {
        self.owner[s as usize] = e;
        self.members[e as usize].push(s);
        self.load[e as usize] += self.weight(s);
        self.var[e as usize] += self.noise_sq(s);
    }

    pub(crate) fn unassign(&mut self, s: u32) {
        let e = self.owner[s as usize];
        let list = &mut self.members[e as usize];
        if let Some(at) = list.iter().position(|&m| m == s) {
            list.swap_remove(at);
        }
        self.load[e as usize] -= self.weight(s);
        self.var[e as usize] = (self.var[e as usize] - self.noise_sq(s)).max(0.0);
        self.owner[s as usize] = NONE;
    }

    /// Moves shard `s` to pod `to`.
    pub(crate) fn move_to(&mut self, s: u32, to: u32) {
        self.unassign(s);
        self.assign(s, to);
    }

    /// Keeps every readable shard on its eligible previous owner; a pod over
    /// the cap keeps its lowest rendezvous scores and releases the rest.
    pub(super) fn keep_sticky(&mut self) {
        let model = self.model;
        for (s, rec) in model.shards.iter().enumerate() {
            if rec.class == Class::Readable && rec.prev_owner != NONE {
                self.assign(index(s), rec.prev_owner);
            }
        }
        let cap = usize::try_from(self.cap).unwrap_or(usize::MAX);
        for e in 0..model.pods.len() {
            if self.members[e].len() <= cap {
                continue;
            }
            let pod_hash = model.pods[e].hash;
            let mut list = self.members[e].clone();
            list.sort_unstable_by_key(|&s| (mix(model.shards[s as usize].hash ^ pod_hash), s));
            for &s in &list[cap..] {
                self.unassign(s);
                self.release[s as usize] = Release::Required;
            }
        }
    }

    /// Places every readable shard without an owner, heaviest first.
    pub(super) fn place_free(&mut self, band: f64) {
        let model = self.model;
        let mut free: Vec<u32> = (0..index(model.shards.len()))
            .filter(|&s| {
                model.shards[s as usize].class == Class::Readable && self.owner[s as usize] == NONE
            })
            .collect();
        free.sort_unstable_by_key(|&s| {
            let rec = &model.shards[s as usize];
            (Reverse(rec.weight), rec.hash, s)
        });
        let total: f64 = model
            .shards
            .iter()
            .filter(|s| s.class == Class::Readable)
            .map(|s| s.weight as f64)
            .sum::<f64>()
            + model.pool_load.iter().map(|l| l.rate as f64).sum::<f64>();
        let per_capacity = total / self.capacity.iter().sum::<f64>();
        // One heap per capacity: the least loaded pod of each capacity is
        // the candidate of that capacity (few distinct capacities, so a
        // shard looks at a few pods, not all).
        let mut classes: BTreeMap<u64, BinaryHeap<Reverse<Entry>>> = BTreeMap::new();
        for e in (0..index(model.pods.len())).filter(|&e| self.has_room(e)) {
            classes
                .entry(self.capacity[e as usize].to_bits())
                .or_default()
                .push(Reverse(self.entry(e)));
        }
        for s in free {
            let w = self.weight(s);
            let parent = self.parent_owner(s, |p, e| {
                p.has_room(e)
                    && p.load[e as usize] + w
                        <= per_capacity * p.capacity[e as usize] * (1.0 + band)
            });
            let target = if parent != NONE {
                Some(parent)
            } else {
                self.least_after(&mut classes, w)
            };
            let Some(e) = target else { break };
            self.assign(s, e);
        }
    }

    /// The pod whose load per unit of capacity is least once it takes a
    /// shard of weight `w` (the greedy for pods of unequal capacity: with
    /// equal capacities, the least loaded), from one heap per capacity;
    /// stale entries are refreshed on the way.
    fn least_after(
        &self,
        classes: &mut BTreeMap<u64, BinaryHeap<Reverse<Entry>>>,
        w: f64,
    ) -> Option<u32> {
        let mut best: Option<(f64, Entry)> = None;
        for heap in classes.values_mut() {
            let Some(top) = self.lightest(heap) else {
                continue;
            };
            let e = top.pod as usize;
            let after = (self.load[e] + w) / self.capacity[e];
            let better = best
                .as_ref()
                .is_none_or(|(b, entry)| after.total_cmp(b).then(top.cmp(entry)).is_lt());
            if better {
                best = Some((after, top));
            }
        }
        best.map(|(_, entry)| entry.pod)
    }

    /// The pod of `heap` with the least load per capacity and room, left on
    /// the heap. Entries may be stale (the pod took a shard since, or a
    /// parent placement changed it): a stale one is replaced by a fresh one.
    fn lightest(&self, heap: &mut BinaryHeap<Reverse<Entry>>) -> Option<Entry> {
        while let Some(&Reverse(top)) = heap.peek() {
            let e = top.pod;
            heap.pop();
            if !self.has_room(e) {
                continue;
            }
            let now = self.entry(e);
            heap.push(Reverse(now));
            if now == top {
                return Some(now);
            }
        }
        None
    }

    fn entry(&self, e: u32) -> Entry {
        let c = self.capacity[e as usize];
        Entry {
            load: self.load[e as usize] / c,
            count: self.members[e as usize].len() as f64 / c,
            hash: self.model.pods[e as usize].hash,
            pod: e,
        }
    }

    /// A new child's preferred pod: the previous owner of one of its
    /// parents that `fits` it, the least loaded first; `NONE` otherwise.
    fn parent_owner(&self, s: u32, fits: impl Fn(&Self, u32) -> bool) -> u32 {
        let rec = &self.model.shards[s as usize];
        if rec.previous.is_some() || rec.parents.is_empty() {
            return NONE;
        }
        rec.parents
            .iter()
            .map(|&parent| self.model.shards[parent as usize].prev_owner)
            .filter(|&e| e != NONE && fits(self, e))
            .min_by(|&a, &b| {
                self.load[a as usize]
                    .total_cmp(&self.load[b as usize])
                    .then(a.cmp(&b))
            })
            .unwrap_or(NONE)
    }
}

/// A pod in the placement heap: least load per capacity first, then the
/// fewest shards per capacity (so shards that weigh nothing still spread),
/// then the pod's hash.
#[derive(Debug, Clone, Copy)]
struct Entry {
    load: f64,
    count: f64,
    hash: u64,
    pod: u32,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.load
            .total_cmp(&other.load)
            .then(self.count.total_cmp(&other.count))
            .then(self.hash.cmp(&other.hash))
            .then(self.pod.cmp(&other.pod))
    }
}
