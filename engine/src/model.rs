//! Validates a [`PlanInput`] and interns it into index-based tables that the
//! placement passes work on: pods sorted by name, shards sorted by id, every
//! shard classified as readable, pending or complete, previous owners resolved
//! to pod indices. Sorting once here is what makes the output independent of
//! the input order. What the shards and the consumer name alone decide (the
//! shards' order, ring positions, lifecycle, parents, key-space weights) is
//! a [`ShardTable`] of its own, which a caller planning the same shards again
//! keeps instead of building anew ([`EngineMemory`](crate::EngineMemory)).

use crate::error::PlanError;
use crate::hash::{self, hash_pair};
use crate::types::{PlanInput, PodLoad, Previous, Shard, ShardState};
use xxhash_rust::xxh3::xxh3_64;

/// Marker for "no pod" in index fields.
pub const NONE: u32 = u32::MAX;

/// Most shards a plan takes: shard indices are `u32`.
pub const MAX_SHARDS: usize = u32::MAX as usize;

/// Most pods a plan takes: pod indices are `u32` below [`NONE`], and the ring
/// numbers `VIRTUAL_NODES` points per pod in a `u32`.
pub const MAX_PODS: usize = (u32::MAX / hash::VIRTUAL_NODES) as usize;

/// An index into `Model::pods`, `Model::shards` or the ring as stored (`u32`).
/// [`Model::build`] rejects inputs over [`MAX_PODS`] and [`MAX_SHARDS`], so
/// every such index fits.
#[allow(clippy::cast_possible_truncation)] // bounded by MAX_PODS / MAX_SHARDS, checked in build
pub(crate) fn index(i: usize) -> u32 {
    debug_assert!(u32::try_from(i).is_ok(), "index {i} over u32");
    i as u32
}

/// One pod, interned.
pub struct PodRec<'a> {
    /// Name (unique).
    pub name: &'a str,
    /// Capacity weight (>= 1).
    pub capacity: u64,
    /// Interned zone (`NONE` when unlabelled).
    pub zone: u32,
    /// Interned node (`NONE` when unknown).
    pub node: u32,
    /// Tie-break position: `xxh3(consumerName ‖ 0 ‖ name)`.
    pub hash: u64,
    /// When it became Ready (Unix seconds; `i64::MIN` when unknown).
    pub ready_since: i64,
}

/// What happens to a shard in this plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Open or closed with every parent complete: gets an owner.
    Readable,
    /// Waiting for an incomplete parent.
    Pending,
    /// Read to the end: drops out.
    Complete,
}

/// One shard, interned.
pub struct ShardRec<'a> {
    /// Id (unique).
    pub id: &'a str,
    /// Ring position: `xxh3(consumerName ‖ 0 ‖ id)`.
    pub hash: u64,
    /// Share of the key space in units of 2^64 keys (hashRange mode), the
    /// measured load in bytes per second (throughput mode), else 1.
    pub weight: u64,
    /// Standard error of a measured load (throughput mode), else 0.
    pub noise: u64,
    /// What a recent shift added to a measured load (throughput mode), else 0.
    pub shift: i64,
    /// Lifecycle class.
    pub class: Class,
    /// The previous entry for this shard, if any.
    pub previous: Option<&'a Previous>,
    /// Previous owner as an eligible-pod index, or `NONE`.
    pub prev_owner: u32,
    /// Parent shard indices (only parents present in the input).
    pub parents: &'a [u32],
}

/// A shard's previous owner as the caller's last plan kept it
/// ([`Model::build_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeptOwner {
    /// The previous assignment has no entry for the shard.
    Unowned,
    /// Its previous owner is eligible pod `e` of this plan.
    Eligible(u32),
    /// Its previous owner is not an eligible pod of this plan.
    Gone,
}

/// The interned input.
pub struct Model<'a> {
    /// Eligible pods (ready, not terminating), sorted by name.
    pub pods: Vec<PodRec<'a>>,
    /// Every shard, sorted by id.
    pub shards: Vec<ShardRec<'a>>,
    /// Number of distinct zones among eligible pods (unlabelled counts as one).
    pub zones: usize,
    /// Number of distinct nodes among eligible pods (unknown counts as one).
    pub nodes: usize,
    /// Every eligible pod by name, for name lookups ([`Model::pod_index`]).
    by_name: PodIndex,
    /// Count mode in a pool of several groups: per eligible pod, whether the
    /// pool-wide deal gives it this group's ⌈⌉ quota (`PlanInput::ceilings`).
    pub ceilings: Option<Vec<bool>>,
    /// Standbys in a pool of several groups with standbys: per eligible
    /// pod, whether the pool-wide deal gives it this group's ⌈⌉ slot quota
    /// (`PlanInput::standby_ceilings`).
    pub standby_ceilings: Option<Vec<bool>>,
    /// Throughput mode in a pool of several throughput groups: per eligible
    /// pod, the load the pool's other groups put on it
    /// (`PlanInput::pool_load`); empty when the group is balanced alone.
    pub pool_load: Vec<PodLoad>,
}

impl<'a> Model<'a> {
    /// Validates and interns `input`, on `table`, the [`ShardTable`] of its
    /// shards and consumer name ([`ShardTable::build`], or kept from an
    /// earlier plan on the same shards).
    pub fn build(input: &'a PlanInput, table: &'a ShardTable) -> Result<Self, PlanError> {
        Self::build_with(input, table, |_| None)
    }

    /// [`Model::build`], with `kept` telling, once the eligible pods are
    /// known, each shard's previous owner as it would be resolved by name
    /// ([`KeptOwner`] per shard in the table's order), or `None` to resolve
    /// them by name. Only the caller's last plan can tell
    /// ([`crate::last_plan`]): the previous assignment is then its output,
    /// and its owners are kept as pod indices.
    pub(crate) fn build_with(
        input: &'a PlanInput,
        table: &'a ShardTable,
        kept: impl FnOnce(&[PodRec<'a>]) -> Option<Vec<KeptOwner>>,
    ) -> Result<Self, PlanError> {
        debug_assert!(table.fits(input), "a shard table of other shards");
        let consumer = input.options.consumer_name.as_bytes();
        let mut buf = Vec::with_capacity(128);
        if input.pods.len() > MAX_PODS {
            return Err(PlanError::TooMany("pods", input.pods.len(), MAX_PODS));
        }
        if input.shards.len() > MAX_SHARDS {
            return Err(PlanError::TooMany("shards", input.shards.len(), MAX_SHARDS));
        }

        // Pods: validate all, keep the eligible ones, sorted by name.
        let mut all: Vec<&crate::types::Pod> = input.pods.iter().collect();
        all.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for pair in all.windows(2) {
            if pair[0].name == pair[1].name {
                return Err(PlanError::DuplicatePod(pair[0].name.clone()));
            }
        }
        let mut zone_names: Vec<&str> = Vec::new();
        let mut node_names: Vec<&str> = Vec::new();
        let mut pods = Vec::with_capacity(all.len());
        for pod in all {
            if pod.name.is_empty() {
                return Err(PlanError::EmptyName("pod name"));
            }
            if pod.capacity == 0 {
                return Err(PlanError::ZeroCapacity(pod.name.clone()));
            }
            if !pod.ready || pod.terminating {
                continue;
            }
            pods.push(PodRec {
                name: &pod.name,
                capacity: u64::from(pod.capacity),
                zone: intern(&mut zone_names, pod.zone.as_deref()),
                node: intern(&mut node_names, pod.node.as_deref()),
                hash: hash_pair(&mut buf, consumer, pod.name.as_bytes()),
                ready_since: pod.ready_since.unwrap_or(i64::MIN),
            });
        }
        let distinct = |key: fn(&PodRec<'_>) -> u32| {
            let mut keys: Vec<u32> = pods.iter().map(key).collect();
            keys.sort_unstable();
            keys.dedup();
            keys.len()
        };
        let zones = distinct(|p| p.zone);
        let nodes = distinct(|p| p.node);

        // Shards sorted by id (the table's order); the previous map is
        // sorted too, so a merge join resolves previous entries without
        // per-shard map lookups.
        if let Some(id) = &table.duplicate {
            return Err(PlanError::DuplicateShard(id.clone()));
        }
        let order: Vec<&'a Shard> = table
            .order
            .iter()
            .map(|&i| &input.shards[i as usize])
            .collect();
        let ranged = input.options.balance.weighs_key_space();
        let throughput = input.options.balance.weighs_load();
        if throughput {
            let band = input
                .options
                .band_percent
                .unwrap_or(crate::types::DEFAULT_BAND_PERCENT);
            if !(1..=100).contains(&band) {
                return Err(PlanError::BadBand(band));
            }
            // A load for an id the input lacks would be dropped unseen: a
            // typo or a stale id, and the shard it meant weighs the mean.
            if let Some(id) = input
                .loads
                .keys()
                .find(|id| order.binary_search_by(|s| s.id.as_str().cmp(id)).is_err())
            {
                return Err(PlanError::UnknownLoad(id.clone()));
            }
        }
        if let Some(error) = &table.invalid {
            return Err(error.clone());
        }
        let kept = kept(&pods);
        debug_assert!(kept.as_ref().is_none_or(|k| k.len() == order.len()));
        let mut prev_iter = input.previous.iter().peekable();
        // With owners kept, the previous entries are the kept owners', in
        // the same (id) order: taken in turn, no id compared.
        let mut prev_values = input.previous.values();
        let mut load_iter = input.loads.iter().peekable();
        let mut unmeasured = Vec::new();
        let mut shards = Vec::with_capacity(order.len());
        for (at, shard) in order.iter().enumerate() {
            let weight = match table.key_weight[at] {
                // A shard without a range weighs 0 for now; hashRange mode
                // gives it the mean weight below.
                0 => u64::from(!ranged),
                weight if ranged => weight,
                _ => 1,
            };
            let (weight, noise, shift) = if throughput {
                match joined(&mut load_iter, &shard.id) {
                    Some(load) => (load.rate, load.noise, load.shift),
                    None => {
                        unmeasured.push(shards.len());
                        (0, 0, 0)
                    }
                }
            } else {
                (weight, 0, 0)
            };
            let (previous, prev_owner) = match kept.as_deref() {
                None => (joined(&mut prev_iter, &shard.id), NONE),
                Some(kept) => match kept[at] {
                    KeptOwner::Unowned => (None, NONE),
                    KeptOwner::Eligible(e) => (prev_values.next(), e),
                    KeptOwner::Gone => (prev_values.next(), NONE),
                },
            };
            let parents = table.parents_of(at);
            shards.push(ShardRec {
                id: &shard.id,
                hash: table.hash[at],
                weight,
                noise,
                shift,
                class: table.class[at],
                previous,
                prev_owner,
                parents,
            });
        }
        if ranged {
            fill_missing_weights(&mut shards);
        }
        if throughput {
            fill_unmeasured(&mut shards, &unmeasured);
        }

        // Previous owners as eligible-pod indices, through a hash table:
        // 100,000 binary searches over pod names cost more than all the rest.
        let by_name = PodIndex::new(&pods);
        let mut model = Model {
            pods,
            shards,
            zones,
            nodes,
            by_name,
            ceilings: None,
            standby_ceilings: None,
            pool_load: Vec::new(),
        };
        model.ceilings = input.ceilings.as_deref().map(|names| model.flags(names));
        model.standby_ceilings = input
            .standby_ceilings
            .as_deref()
            .map(|names| model.flags(names));
        if !input.pool_load.is_empty() {
            let mut pool_load = vec![PodLoad::default(); model.pods.len()];
            for (name, load) in &input.pool_load {
                let at = model.pod_index(name);
                if at != NONE {
                    pool_load[at as usize] = load.clone();
                }
            }
            model.pool_load = pool_load;
        }
        if kept.is_none() {
            for at in 0..model.shards.len() {
                if let Some(prev) = model.shards[at].previous {
                    model.shards[at].prev_owner = model.pod_index(prev.owner());
                }
            }
        }
        Ok(model)
    }

    /// Per eligible pod, whether `names` names it (names of pods that are
    /// not eligible are ignored).
    fn flags(&self, names: &[String]) -> Vec<bool> {
        let mut flags = vec![false; self.pods.len()];
        for name in names {
            let at = self.pod_index(name);
            if at != NONE {
                flags[at as usize] = true;
            }
        }
        flags
    }

    /// Eligible-pod index of a pod name, or `NONE`.
    pub fn pod_index(&self, name: &str) -> u32 {
        self.by_name.find(&self.pods, name)
    }
}

/// An open-addressing hash table of pod names (keyed by `xxh3(name)`, linear
/// probing, at most half full): a lookup is a hash and mostly one probe.
struct PodIndex {
    /// `index + 1` of the pod whose name hashes to this slot (or was pushed
    /// on from an earlier one), 0 for an empty slot; a power of two long.
    slots: Vec<u32>,
    /// Per pod, `xxh3(name)`.
    hashes: Vec<u64>,
}

impl PodIndex {
    fn new(pods: &[PodRec<'_>]) -> Self {
        let len = (pods.len() * 2).next_power_of_two().max(2);
        let mask = len - 1;
        let mut slots = vec![0u32; len];
        let hashes: Vec<u64> = pods.iter().map(|p| xxh3_64(p.name.as_bytes())).collect();
        for (i, &hash) in hashes.iter().enumerate() {
            let mut at = slot(hash, mask);
            while slots[at] != 0 {
                at = (at + 1) & mask;
            }
            slots[at] = index(i) + 1;
        }
        PodIndex { slots, hashes }
    }

    /// The index in `pods` (those it was built of) of `name`, or `NONE`.
    fn find(&self, pods: &[PodRec<'_>], name: &str) -> u32 {
        let hash = xxh3_64(name.as_bytes());
        let mask = self.slots.len() - 1;
        let mut at = slot(hash, mask);
        loop {
            let entry = self.slots[at];
            if entry == 0 {
                return NONE;
            }
            let i = entry - 1;
            if self.hashes[i as usize] == hash && pods[i as usize].name == name {
                return i;
            }
            at = (at + 1) & mask;
        }
    }
}

/// The slot of `hash` in a table of `mask + 1` slots.
#[allow(clippy::cast_possible_truncation)] // masked to the table's length
fn slot(hash: u64, mask: usize) -> usize {
    (hash as usize) & mask
}

/// What a plan's model takes from the shards alone and the consumer name:
/// their order by id, ring positions, lifecycle classes, parents and
/// key-space weights, and the first validation error they hold. Building it
/// sorts, hashes and parses every shard; a caller that plans the same
/// shards again keeps it ([`EngineMemory`](crate::EngineMemory)), and a
/// kept table is the table built afresh, so no output depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardTable {
    /// The consumer name the hashes are of.
    consumer: String,
    /// Number of shards it was built of.
    len: usize,
    /// Indices into the input's shards, sorted by id.
    order: Vec<u32>,
    /// Per shard in id order: `xxh3(consumerName ‖ 0 ‖ id)`.
    hash: Vec<u64>,
    /// Per shard in id order: its lifecycle class.
    class: Vec<Class>,
    /// Parents of the shard at `s` (id order) are
    /// `parents[parents_at[s]..parents_at[s + 1]]`.
    parents_at: Vec<u32>,
    parents: Vec<u32>,
    /// Per shard in id order: the weight of its hash key range
    /// ([`range_weight`], at least 1), 0 without one.
    key_weight: Vec<u64>,
    /// The first id listed twice: the input is refused.
    duplicate: Option<String>,
    /// The first shard (in id order) with an empty id or a bad hash key
    /// range: the input is refused (after the checks of loads).
    invalid: Option<PlanError>,
}

impl ShardTable {
    /// The table of `input`'s shards and consumer name.
    pub fn build(input: &PlanInput) -> Self {
        let consumer = &input.options.consumer_name;
        let mut table = ShardTable {
            consumer: consumer.clone(),
            len: input.shards.len(),
            order: Vec::new(),
            hash: Vec::new(),
            class: Vec::new(),
            parents_at: Vec::new(),
            parents: Vec::new(),
            key_weight: Vec::new(),
            duplicate: None,
            invalid: None,
        };
        if input.shards.len() > MAX_SHARDS {
            // Refused before the table is looked at.
            return table;
        }
        let shards = &input.shards;
        let mut at: Vec<u32> = (0..index(shards.len())).collect();
        at.sort_unstable_by(|&a, &b| shards[a as usize].id.cmp(&shards[b as usize].id));
        let order: Vec<&Shard> = at.iter().map(|&i| &shards[i as usize]).collect();
        if let Some(pair) = order.windows(2).find(|pair| pair[0].id == pair[1].id) {
            table.duplicate = Some(pair[0].id.clone());
            return table;
        }
        table.order = at;
        let mut buf = Vec::with_capacity(128);
        let n = order.len();
        table.hash.reserve_exact(n);
        table.class.reserve_exact(n);
        table.key_weight.reserve_exact(n);
        table.parents_at.reserve_exact(n + 1);
        table.parents_at.push(0);
        for shard in &order {
            if table.invalid.is_none() && shard.id.is_empty() {
                table.invalid = Some(PlanError::EmptyName("shard id"));
            }
            let weight = match &shard.hash_key_range {
                Some(range) => match range_weight(&range.start, &range.end) {
                    Ok(weight) => weight,
                    Err(reason) => {
                        if table.invalid.is_none() {
                            table.invalid = Some(PlanError::BadHashKeyRange {
                                shard: shard.id.clone(),
                                reason,
                            });
                        }
                        0
                    }
                },
                None => 0,
            };
            table.key_weight.push(weight);
            table.hash.push(hash_pair(
                &mut buf,
                consumer.as_bytes(),
                shard.id.as_bytes(),
            ));
            // Lifecycle. A parent id absent from the input is treated as
            // complete: Kinesis trims a parent after retention, long after
            // it was read.
            let (class, parents) = lifecycle(shard, &order);
            table.class.push(class);
            table.parents.extend(parents);
            table.parents_at.push(index(table.parents.len()));
        }
        table
    }

    /// Parent indices (id order) of the shard at `at` (id order).
    fn parents_of(&self, at: usize) -> &[u32] {
        &self.parents[self.parents_at[at] as usize..self.parents_at[at + 1] as usize]
    }

    /// Whether this is the table of `input`'s shards, given that they are
    /// the shards it was built of: the same consumer name and count.
    pub(crate) fn fits(&self, input: &PlanInput) -> bool {
        self.consumer == input.options.consumer_name && self.len == input.shards.len()
    }
}

/// The lifecycle class of `shard` among `order` (every shard of the input,
/// sorted by id), and the indices of its parents in `order`: complete, else
/// pending while a parent present in the input is not complete, else
/// readable.
fn lifecycle(shard: &Shard, order: &[&Shard]) -> (Class, Vec<u32>) {
    let mut parents = Vec::new();
    let mut waiting = false;
    for parent in &shard.parents {
        if let Ok(p) = order.binary_search_by(|s| s.id.as_str().cmp(parent)) {
            parents.push(index(p));
            waiting |= order[p].state != ShardState::Complete;
        }
    }
    let class = match shard.state {
        ShardState::Complete => Class::Complete,
        ShardState::Open | ShardState::Closed if waiting => Class::Pending,
        ShardState::Open | ShardState::Closed => Class::Readable,
    };
    (class, parents)
}

/// How many of `shards` a plan assigns (their lifecycle is readable), by
/// the rule [`Model::build`] applies.
pub fn readable_count(shards: &[Shard]) -> u64 {
    let mut order: Vec<&Shard> = shards.iter().collect();
    order.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    order
        .iter()
        .filter(|shard| lifecycle(shard, &order).0 == Class::Readable)
        .count() as u64
}

/// The entry of `id` in a map iterated in id order alongside the shards
/// (a merge join: both are sorted by id).
fn joined<'m, V>(
    entries: &mut std::iter::Peekable<std::collections::btree_map::Iter<'m, String, V>>,
    id: &str,
) -> Option<&'m V> {
    while let Some((key, value)) = entries.peek() {
        match key.as_str().cmp(id) {
            std::cmp::Ordering::Less => {
                entries.next();
            }
            std::cmp::Ordering::Equal => {
                let value = *value;
                entries.next();
                return Some(value);
            }
            std::cmp::Ordering::Greater => return None,
        }
    }
    None
}

/// Throughput mode: an unmeasured shard (indices `unmeasured`) weighs the
/// mean load of the measured ones (1 when none is measured, so an unmeasured
/// group balances shard counts), with no noise: it is a guess to place by,
/// not a measurement to react to.
fn fill_unmeasured(shards: &mut [ShardRec<'_>], unmeasured: &[usize]) {
    let measured = shards.len() - unmeasured.len();
    let mut sum = 0u128;
    let mut at = unmeasured.iter().peekable();
    for (i, s) in shards.iter().enumerate() {
        if at.peek() == Some(&&i) {
            at.next();
        } else {
            sum += u128::from(s.weight);
        }
    }
    let mean = sum
        .checked_div(measured as u128)
        .map_or(1, |m| u64::try_from(m).unwrap_or(u64::MAX));
    for &i in unmeasured {
        shards[i].weight = mean;
    }
}

fn intern<'a>(names: &mut Vec<&'a str>, name: Option<&'a str>) -> u32 {
    let Some(name) = name else { return NONE };
    match names.iter().position(|n| *n == name) {
        Some(i) => index(i),
        None => {
            names.push(name);
            index(names.len() - 1)
        }
    }
}

/// Weight of an inclusive key range in units of 2^64 keys, rounded up, so the
/// full space weighs 2^64 and the smallest range weighs 1.
pub fn range_weight(start: &str, end: &str) -> Result<u64, String> {
    let start = hash::parse_u128(start).map_err(|e| format!("start: {e}"))?;
    let end = hash::parse_u128(end).map_err(|e| format!("end: {e}"))?;
    if start > end {
        return Err(format!("start {start} is greater than end {end}"));
    }
    // ceil((end - start + 1) / 2^64) = ((end - start) >> 64) + 1; the full
    // space saturates at 2^64 - 1, one unit short, which no balance notices.
    #[allow(clippy::cast_possible_truncation)] // a u128 shifted right by 64 fits in a u64
    let hi = ((end - start) >> 64) as u64;
    Ok(hi.saturating_add(1))
}

/// hashRange mode: a shard without a range weighs the mean of the ranged ones
/// (or 1 when none has a range), so mixed inputs stay plannable.
fn fill_missing_weights(shards: &mut [ShardRec<'_>]) {
    let (sum, n) = shards
        .iter()
        .filter(|s| s.weight > 0)
        .fold((0u128, 0u128), |(sum, n), s| {
            (sum + u128::from(s.weight), n + 1)
        });
    // A mean of u64 weights fits in a u64: the fallback is never taken.
    let mean = sum
        .checked_div(n)
        .map_or(1, |m| u64::try_from(m.max(1)).unwrap_or(u64::MAX));
    for s in shards.iter_mut().filter(|s| s.weight == 0) {
        s.weight = mean;
    }
}
