//! The hash ring: every eligible pod owns [`VIRTUAL_NODES`] points; a shard
//! starts at the first point at or after its own hash and walks clockwise to
//! the first pod that still has room. The walk skips full pods in near
//! constant time through a union-find "next open point" table, so placing
//! 100,000 shards stays linear even when most pods are full.

use crate::hash::{VIRTUAL_NODES, vnode_hash};
use crate::model::{NONE, PodRec, index};

/// Sorted ring points and, per pod, where its points sit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    points: Vec<u64>,
    owner: Vec<u32>,
    /// Ring positions of pod `p` are `by_pod[p * V .. (p + 1) * V]`.
    by_pod: Vec<u32>,
}

impl Ring {
    /// Builds the ring of `pods` (eligible pods, sorted by name).
    pub fn build(pods: &[PodRec<'_>]) -> Self {
        let mut buf = Vec::with_capacity(64);
        let mut nodes: Vec<(u64, u32)> = Vec::with_capacity(pods.len() * VIRTUAL_NODES as usize);
        for (p, pod) in pods.iter().enumerate() {
            for i in 0..VIRTUAL_NODES {
                nodes.push((vnode_hash(&mut buf, pod.name, i), index(p)));
            }
        }
        nodes.sort_unstable();
        Self::from_sorted(&nodes, pods.len())
    }

    /// The ring of `pods` derived from `previous`, the ring of the pods
    /// `renumbering` maps to `pods` (both sorted by name): the points of
    /// pods in both are kept (renumbered), those of pods gone dropped, and
    /// only the pods new to the ring are hashed and merged in. The same
    /// ring as [`Ring::build`] of `pods`, in time linear in the points.
    pub fn derive(previous: &Ring, renumbering: &Renumbering, pods: &[PodRec<'_>]) -> Self {
        let Renumbering { renumber, added } = renumbering;
        let mut buf = Vec::with_capacity(64);
        let mut fresh: Vec<(u64, u32)> = Vec::with_capacity(added.len() * VIRTUAL_NODES as usize);
        for &p in added {
            for i in 0..VIRTUAL_NODES {
                fresh.push((vnode_hash(&mut buf, pods[p].name, i), index(p)));
            }
        }
        fresh.sort_unstable();
        // Kept points stay in (hash, pod) order: renumbering keeps the
        // pods' order. A merge of the two sorted runs is the full sort,
        // written straight into the ring's columns.
        let total = pods.len() * VIRTUAL_NODES as usize;
        let (mut points, mut owner) = (Vec::with_capacity(total), Vec::with_capacity(total));
        let mut fresh = fresh.into_iter().peekable();
        for (&hash, &o) in previous.points.iter().zip(&previous.owner) {
            let p = renumber[o as usize];
            if p == NONE {
                continue;
            }
            while let Some((h, q)) = fresh.next_if(|&next| next < (hash, p)) {
                points.push(h);
                owner.push(q);
            }
            points.push(hash);
            owner.push(p);
        }
        for (h, q) in fresh {
            points.push(h);
            owner.push(q);
        }
        Self::from_columns(points, owner, pods.len())
    }

    /// The ring of sorted `(hash, pod)` points of `pods` pods.
    fn from_sorted(nodes: &[(u64, u32)], pods: usize) -> Self {
        Self::from_columns(
            nodes.iter().map(|n| n.0).collect(),
            nodes.iter().map(|n| n.1).collect(),
            pods,
        )
    }

    /// The ring of sorted points (`points[i]` owned by pod `owner[i]`) of
    /// `pods` pods.
    fn from_columns(points: Vec<u64>, owner: Vec<u32>, pods: usize) -> Self {
        let mut by_pod = vec![0u32; owner.len()];
        let mut fill = vec![0u32; pods];
        for (at, &p) in owner.iter().enumerate() {
            let p = p as usize;
            by_pod[p * VIRTUAL_NODES as usize + fill[p] as usize] = index(at);
            fill[p] += 1;
        }
        Ring {
            points,
            owner,
            by_pod,
        }
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether the ring has no points (no eligible pods).
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The first point at or after `hash`, wrapping around.
    pub fn start(&self, hash: u64) -> usize {
        let at = self.points.partition_point(|&p| p < hash);
        if at == self.points.len() { 0 } else { at }
    }

    /// The pod owning point `at`.
    pub fn pod_at(&self, at: usize) -> u32 {
        self.owner[at]
    }

    fn points_of(&self, pod: u32) -> &[u32] {
        let v = VIRTUAL_NODES as usize;
        &self.by_pod[pod as usize * v..(pod as usize + 1) * v]
    }
}

/// How the pods of a kept ring map onto the pods of the next one (both
/// sorted by name), found in one merge walk of the two lists: what
/// [`Ring::derive`] renumbers the kept points by, and what the kept pod
/// names move by ([`Renumbering::names`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renumbering {
    /// Old pod index → new (or `NONE` for a pod gone).
    renumber: Vec<u32>,
    /// The new pods that had no points yet.
    added: Vec<usize>,
}

impl Renumbering {
    /// The renumbering from `previous_pods` to `pods`.
    pub fn of(previous_pods: &[String], pods: &[PodRec<'_>]) -> Self {
        let mut renumber = vec![NONE; previous_pods.len()];
        let mut added = Vec::new();
        let mut old = previous_pods.iter().enumerate().peekable();
        for (p, pod) in pods.iter().enumerate() {
            let mut kept = false;
            while let Some(&(o, name)) = old.peek() {
                match name.as_str().cmp(pod.name) {
                    std::cmp::Ordering::Less => {
                        old.next();
                    }
                    std::cmp::Ordering::Equal => {
                        renumber[o] = index(p);
                        kept = true;
                        old.next();
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            if !kept {
                added.push(p);
            }
        }
        Self { renumber, added }
    }

    /// The names of `pods`, each moved from `previous_pods` (the names
    /// this renumbering was found from) when it is there: a pod event
    /// changes one or two of thousands, and copying every name again was a
    /// heap allocation per pod.
    pub fn names(&self, previous_pods: Vec<String>, pods: &[PodRec<'_>]) -> Vec<String> {
        let mut names: Vec<Option<String>> = vec![None; pods.len()];
        for (name, &p) in previous_pods.into_iter().zip(&self.renumber) {
            if p != NONE {
                names[p as usize] = Some(name);
            }
        }
        names
            .into_iter()
            .zip(pods)
            .map(|(name, pod)| name.unwrap_or_else(|| pod.name.to_owned()))
            .collect()
    }
}

/// A walk over the ring that skips pods closed for having no room.
pub struct Walker {
    next: Vec<u32>,
    open_pods: usize,
    closed: Vec<bool>,
}

impl Walker {
    /// Starts with the pods for which `open(pod)` holds.
    pub fn new(ring: &Ring, pods: usize, open: impl Fn(u32) -> bool) -> Self {
        let mut walker = Walker {
            next: (0..index(ring.len())).collect(),
            open_pods: pods,
            closed: vec![false; pods],
        };
        for p in 0..index(pods) {
            if !open(p) {
                walker.close(ring, p);
            }
        }
        walker
    }

    /// Takes `pod` out of every later walk.
    pub fn close(&mut self, ring: &Ring, pod: u32) {
        if std::mem::replace(&mut self.closed[pod as usize], true) {
            return;
        }
        self.open_pods -= 1;
        let n = index(self.next.len());
        for &at in ring.points_of(pod) {
            self.next[at as usize] = (at + 1) % n;
        }
    }

    /// Whether `pod` is still open.
    pub fn is_open(&self, pod: u32) -> bool {
        !self.closed[pod as usize]
    }

    /// The first point at or after `at` whose pod is open.
    pub fn find(&mut self, at: usize) -> Option<usize> {
        if self.open_pods == 0 {
            return None;
        }
        let mut v = at;
        while self.next[v] as usize != v {
            let skip = self.next[self.next[v] as usize];
            self.next[v] = skip;
            v = skip as usize;
        }
        Some(v)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Eligible pods of these names (sorted), for a ring.
    pub(crate) fn recs(names: &[String]) -> Vec<PodRec<'_>> {
        names
            .iter()
            .map(|name| PodRec {
                name,
                capacity: 1,
                zone: NONE,
                node: NONE,
                hash: 0,
                ready_since: 0,
            })
            .collect()
    }

    fn sorted(names: impl IntoIterator<Item = String>) -> Vec<String> {
        let mut names: Vec<String> = names.into_iter().collect();
        names.sort();
        names.dedup();
        names
    }

    /// A derived ring is the built one, whatever pods joined and left
    /// (first, last, in the middle, all of them, none).
    #[test]
    fn a_derived_ring_is_the_ring_built_afresh() {
        let base = sorted((0..300).map(|i| format!("pod-{i}")));
        let cases: Vec<Vec<String>> = vec![
            base.clone(),
            sorted(base.iter().cloned().chain(["pod-150a".into()])),
            sorted(
                base.iter()
                    .cloned()
                    .chain(["a-first".into(), "z-last".into()]),
            ),
            base[1..].to_vec(),
            base[..base.len() - 1].to_vec(),
            sorted(base.iter().filter(|n| !n.ends_with('7')).cloned()),
            sorted(
                base.iter()
                    .filter(|n| !n.ends_with('3'))
                    .cloned()
                    .chain((0..40).map(|i| format!("new-{i}"))),
            ),
            sorted((0..50).map(|i| format!("other-{i}"))),
            Vec::new(),
        ];
        let previous = Ring::build(&recs(&base));
        for names in &cases {
            let pods = recs(names);
            assert_eq!(
                Ring::derive(&previous, &Renumbering::of(&base, &pods), &pods),
                Ring::build(&pods),
                "{} pods",
                names.len()
            );
            // And back.
            let from = Ring::build(&pods);
            assert_eq!(
                Ring::derive(&from, &Renumbering::of(names, &recs(&base)), &recs(&base)),
                previous,
                "back from {} pods",
                names.len()
            );
        }
    }
}
