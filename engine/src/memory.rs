//! What a caller's plans keep for its next one
//! ([`plan_with`](crate::plan_with)): the last ring planned on, and the
//! [`ShardTable`] of the last shards planned.
//!
//! A ring depends only on the eligible pods' names, and a group's pods
//! rarely change between two of its plans: the same pods reuse the ring as
//! is, and pods that differ by a few derive it from the kept one
//! ([`Ring::derive`]) instead of hashing and sorting every pod's points
//! again. Either way it is the ring [`Ring::build`] makes.
//!
//! A shard table depends only on the shards and the consumer name, and a
//! group's shards are one shared list (`PlanInput::shards`, an `Arc` the
//! caller's topology holds) from one read of the source to the next: the
//! same list (the same allocation, [`Arc::ptr_eq`]) with the same consumer
//! name reuses the table as is; any other is built afresh. Either way it is
//! the table [`ShardTable::build`] makes.
//!
//! So the engine's output never depends on what was kept (nor on which
//! plans ran before). Owned by the caller, one per stream of related plans
//! (the operator keeps one per ShardGroup): nothing is shared between
//! callers or kept by the engine itself.

use std::borrow::Cow;
use std::sync::{Arc, Weak};

use crate::last_plan::LastPlan;
use crate::model::{PodRec, ShardTable};
use crate::ring::{Renumbering, Ring};
use crate::types::{PlanInput, PreviousAssignment, Shard};

/// Fewer eligible pods than this are planned on a ring built afresh (cheap
/// at that size) and nothing is kept: a thousand small groups keep no rings.
const MIN_PODS: usize = 256;

/// Fewer shards than this are planned on a table built afresh (cheap at
/// that size) and none is kept.
const MIN_SHARDS: usize = 1024;

/// The last ring planned on and the pods it was built of (sorted by name),
/// at 5,000 pods about 1.4 MiB; the shard table of the last shards planned,
/// at 20,000 shards about 0.5 MiB.
#[derive(Clone, Default)]
pub struct EngineMemory {
    kept: Option<Kept>,
    shards: Option<KeptShards>,
    /// The last plan's owners and assignment, for the next to patch.
    last: Option<LastPlan>,
    /// Rings kept so far: numbers each kept ring's pods.
    generations: u64,
    /// Plans that built on the last plan's owners ([`Self::patched`]).
    patched: u64,
}

/// A shard table and the list of shards it is of. A `Weak` pointer, so the
/// same address means the same shards: while it is kept the allocation
/// stays (no other list takes its address) and cannot be written
/// (`Arc::get_mut` refuses, `Arc::make_mut` moves the list to a new
/// allocation first), and yet the shards themselves are freed with the
/// caller's last `Arc`.
#[derive(Clone)]
struct KeptShards {
    of: Weak<Vec<Shard>>,
    table: ShardTable,
}

#[derive(Clone)]
struct Kept {
    pods: Vec<String>,
    ring: Ring,
    /// Which of the memory's kept rings this is (its pods' indices are the
    /// ones a [`LastPlan`] points into).
    generation: u64,
}

impl std::fmt::Debug for EngineMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineMemory")
            .field("pods", &self.kept.as_ref().map_or(0, |k| k.pods.len()))
            .field("shards", &self.shards.is_some())
            .field("last", &self.last.is_some())
            .finish()
    }
}

impl EngineMemory {
    /// The shard table of `input`, the memory to find its ring in and the
    /// last plan's owners (to build on when the table is the kept one): the
    /// kept table when `input` plans the very shards it was built of (the
    /// same `Arc`) for the same consumer, else one built afresh (and kept
    /// when the list is long enough to be worth it).
    pub(crate) fn shard_table(
        &mut self,
        input: &PlanInput,
    ) -> (
        Cow<'_, ShardTable>,
        RingMemoryRef<'_>,
        &mut Option<LastPlan>,
    ) {
        let reuse = self.keeps_shard_table_of(input);
        let Self {
            kept,
            shards,
            last,
            generations,
            patched: _,
        } = self;
        let rings = RingMemoryRef { kept, generations };
        if !reuse {
            *shards = None;
            let table = ShardTable::build(input);
            if input.shards.len() < MIN_SHARDS {
                return (Cow::Owned(table), rings, last);
            }
            *shards = Some(KeptShards {
                of: Arc::downgrade(&input.shards),
                table,
            });
        }
        let table = &shards.as_ref().expect("kept above").table;
        (Cow::Borrowed(table), rings, last)
    }

    /// How many plans on this memory built on the last plan's owners and
    /// patched its assignment ([`crate::last_plan`]): the output is the
    /// same either way, so only this (or the time a plan takes) tells.
    pub fn patched(&self) -> u64 {
        self.patched
    }

    /// Counts a plan that patched the last plan's assignment.
    pub(crate) fn note_patched(&mut self) {
        self.patched += 1;
    }

    /// Tells the memory the previous assignment its next plan will be
    /// given (the caller's view of what it published), so that the check
    /// that it is the last plan's output ([`crate::last_plan`]) is made now
    /// rather than on the way to the next plan. Nothing decides differently
    /// for it.
    pub fn expect_previous(&mut self, previous: &Arc<PreviousAssignment>) {
        if let Some(last) = &mut self.last {
            last.expect_previous(previous);
        }
    }

    /// Whether a plan of `input` would reuse the shard table kept here
    /// rather than build one: `input` lists the very shards it was built of
    /// (the same `Arc`) for the same consumer name. Nothing else tells: the
    /// output is the same either way.
    pub fn keeps_shard_table_of(&self, input: &PlanInput) -> bool {
        self.shards.as_ref().is_some_and(|k| {
            std::ptr::eq(k.of.as_ptr(), Arc::as_ptr(&input.shards)) && k.table.fits(input)
        })
    }

    /// The ring of `pods` (see [`RingMemoryRef::ring_of`]).
    #[cfg(test)]
    fn ring_of(&mut self, pods: &[PodRec<'_>]) -> RingRef<'_> {
        RingMemoryRef {
            kept: &mut self.kept,
            generations: &mut self.generations,
        }
        .ring_of(pods)
        .0
    }
}

/// The ring part of an [`EngineMemory`], borrowed beside its shard table.
pub(crate) struct RingMemoryRef<'a> {
    kept: &'a mut Option<Kept>,
    generations: &'a mut u64,
}

impl<'a> RingMemoryRef<'a> {
    /// The kept ring's pods (sorted by name) and their generation.
    pub(crate) fn pods(&self) -> Option<(&[String], u64)> {
        self.kept
            .as_ref()
            .map(|k| (k.pods.as_slice(), k.generation))
    }

    /// The ring of `pods` (eligible pods, sorted by name), kept for the
    /// next plan when the pool is large enough to be worth it; and when it
    /// is, the generation of the kept ring's pods (which are then `pods`).
    pub(crate) fn ring_of(self, pods: &[PodRec<'_>]) -> (RingRef<'a>, Option<u64>) {
        if pods.len() < MIN_PODS {
            *self.kept = None;
            return (RingRef::Built(Ring::build(pods)), None);
        }
        if !self.kept.as_ref().is_some_and(|k| same_pods(&k.pods, pods)) {
            // Derived from the kept ring: linear in its points, and only the
            // pods new to it are hashed (all of them for another pool,
            // which is building afresh plus one pass).
            let (ring, names) = match self.kept.take() {
                Some(k) => {
                    let renumbering = Renumbering::of(&k.pods, pods);
                    (
                        Ring::derive(&k.ring, &renumbering, pods),
                        renumbering.names(k.pods, pods),
                    )
                }
                None => (
                    Ring::build(pods),
                    pods.iter().map(|p| p.name.to_owned()).collect(),
                ),
            };
            *self.generations += 1;
            *self.kept = Some(Kept {
                pods: names,
                ring,
                generation: *self.generations,
            });
        }
        let kept = self.kept.as_ref().expect("kept above");
        (RingRef::Kept(&kept.ring), Some(kept.generation))
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
        let mut memory = EngineMemory::default();
        for names in [&a, &a, &a_joined, &a_left, &b, &a, &small, &b, &a_joined] {
            let pods = recs(names);
            assert_eq!(*memory.ring_of(&pods), Ring::build(&pods), "{}", names[0]);
        }
    }

    /// Whatever one memory planned before (the same list, the same list
    /// changed in place, a new list of the same shards or of others,
    /// another consumer name, a short list), the shard table it hands out
    /// is the table built afresh.
    #[test]
    fn every_table_handed_out_is_the_table_built_afresh() {
        let shard = |id: String| Shard {
            id,
            hash_key_range: None,
            parents: Vec::new(),
            state: crate::types::ShardState::Open,
        };
        let list = |n: usize| -> Arc<Vec<Shard>> {
            Arc::new((0..n).map(|i| shard(format!("s-{i:05}"))).collect())
        };
        let mut input = PlanInput {
            shards: list(2_000),
            ..PlanInput::default()
        };
        let mut memory = EngineMemory::default();
        let mut check = |input: &PlanInput, kept: bool| {
            assert_eq!(*memory.shard_table(input).0, ShardTable::build(input));
            assert_eq!(memory.shards.is_some(), kept);
        };
        check(&input, true);
        check(&input, true);
        Arc::make_mut(&mut input.shards)[3].state = crate::types::ShardState::Complete;
        check(&input, true);
        Arc::make_mut(&mut input.shards).push(shard("s-new".into()));
        check(&input, true);
        input.shards = Arc::new((*input.shards).clone());
        check(&input, true);
        input.options.consumer_name = "other".into();
        check(&input, true);
        input.shards = list(3_000);
        check(&input, true);
        input.shards = list(10);
        check(&input, false);
        input.shards = list(2_000);
        check(&input, true);
    }

    /// A small pool keeps nothing.
    #[test]
    fn a_small_pool_keeps_no_ring() {
        let names: Vec<String> = (0..10).map(|i| format!("p-{i}")).collect();
        let mut memory = EngineMemory::default();
        let _ = memory.ring_of(&recs(&names));
        assert!(memory.kept.is_none());
    }
}
