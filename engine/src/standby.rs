//! Standby placement: `standbys: N` backup pods per assigned shard.
//!
//! A standby is never the shard's owner and never listed twice. Standby slots
//! are spread evenly: each pod gets a quota of ⌊T/P⌋ or ⌈T/P⌉ slots (weighted
//! by capacity) where T = assigned shards × N; in a pool of several groups
//! with standbys the pool's deal names the pods that take the ⌈⌉ slots
//! (`PlanInput::standby_ceilings`), so each pod's slots over the pool stay
//! within one of its share. Previous standbys stay while
//! they are eligible, within quota and in another zone (multi-zone pool) or on
//! another node (single-zone pool) than the owner. New standbys walk the ring from a second position,
//! `mix(shardHash)`, over pods with slots left and take the first candidate
//! in another zone than the owner and the other standbys, else another zone
//! than the owner, else another node; a walk inspects at most
//! [`CANDIDATES`] pods before settling for the best seen. Topology beats even
//! spread: a standby shares the owner's zone (in a multi-zone pool) or node
//! (in a single-zone pool) only when every other pod is taken.

use crate::hash::mix;
use crate::model::{Class, Model, NONE, index};
use crate::quota::apportion_preferring;
use crate::ring::{Ring, Walker};
use crate::types::PlanOptions;

/// Most candidate pods a standby walk inspects before taking the best seen.
pub const CANDIDATES: usize = 64;

// Candidate score bits, most important first. `HARD` bits are avoided even
// at the cost of a pod's standby quota.
const SAME_ZONE: u32 = 4;
const SAME_NODE: u32 = 2;
const ZONE_TAKEN: u32 = 1;
const HARD: u32 = SAME_ZONE | SAME_NODE;

/// Standbys per shard (indexed like `Model::shards`; empty when none).
pub fn place(
    model: &Model<'_>,
    options: &PlanOptions,
    ring: &Ring,
    owner: &[u32],
) -> Vec<Vec<u32>> {
    let p = model.pods.len();
    let k = (options.standbys as usize).min(p.saturating_sub(1));
    if k == 0 {
        return Vec::new();
    }
    let pods = &model.pods;
    let assigned: Vec<u32> = (0..index(model.shards.len()))
        .filter(|&s| model.shards[s as usize].class == Class::Readable && owner[s as usize] != NONE)
        .collect();
    let mut chosen: Vec<Vec<u32>> = vec![Vec::new(); model.shards.len()];

    // Sticky candidates: previous standbys that are eligible and not the owner.
    let zone_matters = model.zones >= 2;
    let node_matters = model.nodes >= 2;
    let keepable = |s: u32, e: u32| {
        let o = owner[s as usize] as usize;
        e != NONE
            && e as usize != o
            && !(zone_matters && pods[e as usize].zone == pods[o].zone)
            && !(node_matters && pods[e as usize].node == pods[o].node)
    };
    let mut current = vec![0u64; p];
    let mut previous: Vec<(u32, Vec<u32>)> = Vec::new();
    for &s in &assigned {
        if let Some(prev) = model.shards[s as usize].previous {
            let list: Vec<u32> = prev
                .standbys()
                .iter()
                .map(|name| model.pod_index(name))
                .filter(|&e| keepable(s, e))
                .collect();
            for &e in &list {
                current[e as usize] += 1;
            }
            if !list.is_empty() {
                previous.push((s, list));
            }
        }
    }
    let weights: Vec<u64> = pods.iter().map(|p| p.capacity).collect();
    let hashes: Vec<u64> = pods.iter().map(|p| p.hash).collect();
    let quota = apportion_preferring(
        (assigned.len() * k) as u64,
        &weights,
        0,
        &current,
        &hashes,
        model.standby_ceilings.as_deref(),
    );
    let mut load = vec![0u64; p];
    let was_standby = |s: u32, e: u32| {
        model.shards[s as usize].previous.is_some_and(|prev| {
            prev.standbys()
                .iter()
                .any(|name| model.pod_index(name) == e)
        })
    };
    for (s, list) in &previous {
        let (s, list) = (*s, list.iter().copied());
        let mine = &mut chosen[s as usize];
        for e in list {
            if mine.len() < k && !mine.contains(&e) && load[e as usize] < quota[e as usize] {
                mine.push(e);
                load[e as usize] += 1;
            }
        }
    }

    // New standbys, shards in ring order.
    let mut order = assigned;
    order.sort_unstable_by_key(|&s| (model.shards[s as usize].hash, s));
    let mut walker = Walker::new(ring, p, |e| load[e as usize] < quota[e as usize]);
    for s in order {
        let o = owner[s as usize] as usize;
        while chosen[s as usize].len() < k {
            let mine = &chosen[s as usize];
            // Lower is better; 0 is as good as the topology allows.
            let score = |e: usize| -> u32 {
                let zone = pods[e].zone;
                let mut score = 0;
                if zone_matters && zone == pods[o].zone {
                    score |= SAME_ZONE;
                }
                if node_matters && pods[e].node == pods[o].node {
                    score |= SAME_NODE;
                }
                if zone_matters && mine.iter().any(|&m| pods[m as usize].zone == zone) {
                    score |= ZONE_TAKEN;
                }
                score
            };
            let mut best: Option<(u32, u32)> = None;
            let mut seen = 0;
            let mut at = walker.find(ring.start(mix(model.shards[s as usize].hash)));
            for _ in 0..ring.len() {
                let Some(point) = at else { break };
                let e = ring.pod_at(point);
                if e as usize != o && !mine.contains(&e) {
                    let sc = score(e as usize);
                    if best.is_none_or(|(b, _)| sc < b) {
                        best = Some((sc, e));
                    }
                    seen += 1;
                    if sc == 0 || seen >= CANDIDATES {
                        break;
                    }
                }
                at = walker.find((point + 1) % ring.len());
            }
            // Topology beats even spread: when no pod with slots left is in
            // another zone (or on another node) than the owner but such a pod
            // exists, or every pod with slots left is the owner or already
            // chosen, take the best placed, least-loaded pod over its quota.
            let e = match best {
                Some((sc, e)) if sc & HARD == 0 => e,
                _ => {
                    // Where it was, even in a worse place than topology
                    // would like (no other node had room): placed afresh,
                    // an equal choice would alternate between plans.
                    let was = |e: u32| !was_standby(s, e);
                    (0..index(p))
                        .filter(|&e| e as usize != o && !mine.contains(&e))
                        .min_by_key(|&e| {
                            (
                                score(e as usize) & HARD,
                                was(e),
                                load[e as usize],
                                score(e as usize),
                                e,
                            )
                        })
                        .expect("k < P leaves a candidate")
                }
            };
            chosen[s as usize].push(e);
            load[e as usize] += 1;
            if load[e as usize] >= quota[e as usize] {
                walker.close(ring, e);
            }
        }
    }
    if model.standby_ceilings.is_some() {
        let hard = |e: u32, s: u32| -> u32 {
            let (e, o) = (e as usize, owner[s as usize] as usize);
            let mut bits = 0;
            if zone_matters && pods[e].zone == pods[o].zone {
                bits |= SAME_ZONE;
            }
            if node_matters && pods[e].node == pods[o].node {
                bits |= SAME_NODE;
            }
            bits
        };
        settle(owner, &mut chosen, &mut load, &quota, hard);
    }
    // Pod-name order: the list is a set, and a canonical order keeps the
    // output identical however the standbys were found.
    for list in &mut chosen {
        list.sort_unstable();
    }
    chosen
}

/// Pool mode: the deal's slot quotas are what keeps every pod's standby
/// slots over the pool within one of its share, so a standby the walk
/// left on a pod over its quota (every pod with slots left was the shard's
/// owner or already its standby) moves to a pod under its quota, directly
/// or by taking another shard's standby whose place that pod can fill. A
/// move never puts a standby in a worse place (`hard`: its zone and node
/// against its owner's). Each move brings one slot back within quota, so
/// this ends; what no such move fixes stays (a group of one shard cannot
/// give its slot to its owner), and does not keep another pod's slots
/// over its quota (every pod over its quota is tried).
fn settle(
    owner: &[u32],
    chosen: &mut [Vec<u32>],
    load: &mut [u64],
    quota: &[u64],
    hard: impl Fn(u32, u32) -> u32,
) {
    let fits = |chosen: &[Vec<u32>], q: u32, s: u32, instead: u32| {
        q != owner[s as usize] && !chosen[s as usize].contains(&q) && hard(q, s) <= hard(instead, s)
    };
    let shards = index(chosen.len());
    // Every pod over its quota is tried: one that no move can bring back
    // (topology) must not keep the others over theirs.
    'again: loop {
        let room: Vec<u32> = (0..index(load.len()))
            .filter(|&q| load[q as usize] < quota[q as usize])
            .collect();
        let slots_over_quota: Vec<(u32, u32)> = (0..index(load.len()))
            .filter(|&e| load[e as usize] > quota[e as usize])
            .flat_map(|over| (0..shards).map(move |s| (over, s)))
            .filter(|&(over, s)| chosen[s as usize].contains(&over))
            .collect();
        for (over, s) in slots_over_quota {
            if let Some(&q) = room.iter().find(|&&q| fits(chosen, q, s, over)) {
                replace(&mut chosen[s as usize], over, q);
                load[over as usize] -= 1;
                load[q as usize] += 1;
                continue 'again;
            }
            // One hop: shard t gives its standby f to s and takes q.
            for t in (0..shards).filter(|&t| t != s) {
                for f in chosen[t as usize].clone() {
                    if !fits(chosen, f, s, over) {
                        continue;
                    }
                    if let Some(&q) = room.iter().find(|&&q| fits(chosen, q, t, f)) {
                        replace(&mut chosen[t as usize], f, q);
                        replace(&mut chosen[s as usize], over, f);
                        load[over as usize] -= 1;
                        load[q as usize] += 1;
                        continue 'again;
                    }
                }
            }
        }
        return;
    }
}

/// Replaces `from` by `to` in `list`.
fn replace(list: &mut [u32], from: u32, to: u32) {
    if let Some(at) = list.iter().position(|&e| e == from) {
        list[at] = to;
    }
}
