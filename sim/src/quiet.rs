//! The checks once the system went quiet: every readable shard has exactly
//! one owner that reads it, the load is balanced within one shard (by
//! throughput: the load checks of [`crate::load`]), no handoff is in flight
//! and planning again changes nothing.

use std::collections::BTreeMap;

use crate::sim::Sim;
use shardring_core::plan::Moves;

impl Sim {
    /// The checks once the system went quiet.
    pub(crate) fn check_quiet(&mut self) {
        let Some(doc) = self.op.doc.clone() else {
            self.world.violate("no document after quiescence".into());
            return;
        };
        let eligible: Vec<String> = self.eligible_since().map(|(p, _)| p.name.clone()).collect();
        let mut loads: BTreeMap<&str, u64> = eligible.iter().map(|p| (p.as_str(), 0)).collect();
        for s in &self.world.stream {
            if self.world.rules.lease_table && self.world.complete(&s.id) {
                continue;
            }
            let parents_done =
                !self.world.rules.lease_table || s.parents.iter().all(|p| self.world.complete(p));
            if !parents_done {
                continue;
            }
            let Some(r) = doc.shards.get(&s.id) else {
                self.world
                    .violate(format!("quiet: {} missing from the document", s.id));
                return;
            };
            let owner = match (&r.state, &r.owner) {
                (crate::crds::ShardPhase::Active, Some(o)) if loads.contains_key(o.as_str()) => o,
                _ => {
                    self.world.violate(format!(
                        "quiet: {} is {:?} on {:?} (handoff {:?}), not active on an eligible pod {:?}; lease {:?}",
                        s.id,
                        r.state,
                        r.owner,
                        r.handoff,
                        loads.keys().collect::<Vec<_>>(),
                        self.world.leases.get(&s.id)
                    ));
                    return;
                }
            };
            *loads.get_mut(owner.as_str()).expect("eligible") += 1;
            let read = self.world.pods.iter().any(|p| {
                &p.name == owner
                    && p.process
                        .as_ref()
                        .is_some_and(|c| c.reading.contains_key(&s.id))
            });
            if !read {
                let pod = self.world.pods.iter().find(|p| &p.name == owner);
                let process = pod.and_then(|p| p.process.as_ref()).map(|c| {
                    format!(
                        "view epoch {} active {:?}, reading {:?}",
                        c.view.epoch,
                        c.view.active,
                        c.reading.keys().collect::<Vec<_>>()
                    )
                });
                let what = format!(
                    "quiet: {} owned by {owner} (document epoch {}) but nobody reads it; process: {process:?}; annotation: {:?}; lease: {:?}",
                    s.id,
                    doc.epoch,
                    pod.and_then(|p| p.annotation.clone()),
                    self.world.leases.get(&s.id)
                );
                self.world.violate(what);
                return;
            }
        }
        let (min, max) = (
            loads.values().min().copied().unwrap_or(0),
            loads.values().max().copied().unwrap_or(0),
        );
        // Balanced by throughput, shard counts need not be even: the band is
        // checked instead.
        if max > min + 1 && !self.by_throughput() {
            self.world
                .violate(format!("quiet: unbalanced loads {loads:?}"));
            return;
        }
        let obs = self.op.observe(&self.world, &mut self.rng);
        let again = shardring_core::plan(&obs);
        if again.document_write.is_some() || again.moves != Moves::default() {
            self.world
                .violate("quiet: planning again still changes the document".into());
            return;
        }
        if self.by_throughput() {
            self.check_load_quiet(again.status.throughput.clone());
        }
    }
}
