//! The ring of a caller's last plan, kept by that caller for its next one
//! ([`plan_with`](crate::plan_with)). A ring depends only on the eligible
//! pods' names, and a group's pods rarely change between two of its plans:
//! the same pods reuse the ring as is, and pods that differ by a few derive
//! it from the kept one ([`Ring::derive`]) instead of hashing and sorting
//! every pod's points again. Either way it is the ring [`Ring::build`]
//! makes, so the engine's output never depends on what was kept (nor on
//! which plans ran before).
//!
//! Owned by the caller, one per stream of related plans (the operator keeps
//! one per ShardGroup): nothing is shared between callers or kept by the
//! engine itself.

use crate::model::PodRec;
use crate::ring::Ring;

/// Fewer eligible pods than this are planned on a ring built afresh (cheap
/// at that size) and nothing is kept: a thousand small groups keep no rings.
const MIN_PODS: usize = 256;

/// The last ring planned on and the pods it was built of (sorted by name).
/// At 5,000 pods about 1.4 MiB.
#[derive(Clone, Default)]
pub struct RingMemory {
    kept: Option<Kept>,
}

#[derive(Clone)]
struct Kept {
    pods: Vec<String>,
    ring: Ring,
}

impl std::fmt::Debug for RingMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingMemory")
            .field("pods", &self.kept.as_ref().map_or(0, |k| k.pods.len()))
            .finish()
    }
}

impl RingMemory {
    /// The ring of `pods` (eligible pods, sorted by name), kept for the
    /// next plan when the pool is large enough to be worth it.
    pub(crate) fn ring_of(&mut self, pods: &[PodRec<'_>]) -> RingRef<'_> {
        if pods.len() < MIN_PODS {
            self.kept = None;
            return RingRef::Built(Ring::build(pods));
        }
        if !self.kept.as_ref().is_some_and(|k| same_pods(&k.pods, pods)) {
            // Derived from the kept ring: linear in its points, and only the
            // pods new to it are hashed (all of them for another pool,
            // which is building afresh plus one pass).
            let ring = match self.kept.take() {
                Some(k) => Ring::derive(&k.ring, &k.pods, pods),
                None => Ring::build(pods),
            };
            self.kept = Some(Kept {
                pods: pods.iter().map(|p| p.name.to_owned()).collect(),
                ring,
            });
        }
        RingRef::Kept(&self.kept.as_ref().expect("kept above").ring)
    }
}

/// A ring kept in the memory, or built for this plan alone.
pub(crate) enum RingRef<'a> {
    Kept(&'a Ring),
    Built(Ring),
}

impl std::ops::Deref for RingRef<'_> {
    type Target = Ring;

    fn deref(&self) -> &Ring {
        match self {
            Self::Kept(ring) => ring,
            Self::Built(ring) => ring,
        }
    }
}

fn same_pods(kept: &[String], pods: &[PodRec<'_>]) -> bool {
    kept.len() == pods.len() && kept.iter().zip(pods).all(|(k, p)| k == p.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::tests::recs;

    /// Whatever one memory planned on before (the same pods, a few more or
    /// fewer, other pods, a small pool), the ring it hands out is the ring
    /// built afresh.
    #[test]
    fn every_ring_handed_out_is_the_ring_built_afresh() {
        let group = |prefix: &str, n: usize| -> Vec<String> {
            let mut names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:04}")).collect();
            names.sort();
            names
        };
        let a = group("a", 400);
        let mut a_joined = a.clone();
        a_joined.insert(7, "a-0006x".into());
        let a_left = a[1..].to_vec();
        let b = group("b", 300);
        let small = group("s", 10);
        let mut memory = RingMemory::default();
        for names in [&a, &a, &a_joined, &a_left, &b, &a, &small, &b, &a_joined] {
            let pods = recs(names);
            assert_eq!(*memory.ring_of(&pods), Ring::build(&pods), "{}", names[0]);
        }
    }

    /// A small pool keeps nothing.
    #[test]
    fn a_small_pool_keeps_no_ring() {
        let names: Vec<String> = (0..10).map(|i| format!("p-{i}")).collect();
        let mut memory = RingMemory::default();
        let _ = memory.ring_of(&recs(&names));
        assert!(memory.kept.is_none());
    }
}
