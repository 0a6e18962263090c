//! The checks once the system went quiet, for every group: every readable
//! shard has exactly one owner that reads it, the load is balanced within
//! one shard (by throughput: the load checks of [`crate::load`]), no
//! handoff is in flight and planning again changes nothing (in pool mode,
//! also for a new leader whose book of the pool's balance starts empty).
//! The pool-wide checks of pool mode are [`crate::pool`]'s.

use std::collections::BTreeMap;

use crate::crds::ShardPhase;
use crate::operator::BookAtRest;
use crate::sim::Sim;
use shardring_core::plan::Moves;

impl Sim {
    /// The checks once the system went quiet.
    pub(crate) fn check_quiet(&mut self) {
        for g in 0..self.op.groups.len() {
            self.check_group_quiet(g);
            if self.world.violation.is_some() {
                return;
            }
        }
        if self.op.pooled() {
            self.check_pool_quiet();
        }
    }

    /// What a message about group `g` starts with: its name when there are
    /// several.
    pub(crate) fn label(&self, g: usize) -> String {
        if self.op.pooled() {
            format!("{}: ", self.op.groups[g].name())
        } else {
            String::new()
        }
    }

    /// The active shards of group `g` on each eligible pod, when every
    /// readable shard of it is active on an eligible pod; the first that
    /// is not, said, otherwise.
    pub(crate) fn active_per_pod(&self, g: usize) -> Result<BTreeMap<String, u64>, String> {
        let label = self.label(g);
        let Some(doc) = &self.op.groups[g].doc else {
            return Err(format!("{label}no document after quiescence"));
        };
        let mut loads: BTreeMap<String, u64> = self
            .eligible_since()
            .map(|(p, _)| (p.name.clone(), 0))
            .collect();
        for s in self.world.stream.iter().filter(|s| s.group == g) {
            if !self.world.to_be_read(s) {
                continue;
            }
            let Some(r) = doc.shards.get(&s.id) else {
                return Err(format!("quiet: {} missing from the document", s.id));
            };
            let owner = match (&r.state, &r.owner) {
                (ShardPhase::Active, Some(o)) if loads.contains_key(o.as_str()) => o,
                _ => {
                    return Err(format!(
                        "quiet: {} is {:?} on {:?} (handoff {:?}), not active on an eligible pod {:?}; lease {:?}",
                        s.id,
                        r.state,
                        r.owner,
                        r.handoff,
                        loads.keys().collect::<Vec<_>>(),
                        self.world.leases.get(&s.id)
                    ));
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
                        c.views[g].epoch,
                        c.views[g].active,
                        c.reading.keys().collect::<Vec<_>>()
                    )
                });
                return Err(format!(
                    "quiet: {} owned by {owner} (document epoch {}) but nobody reads it; process: {process:?}; annotation: {:?}; lease: {:?}",
                    s.id,
                    doc.epoch,
                    pod.and_then(|p| p.annotations.get(&g).cloned()),
                    self.world.leases.get(&s.id)
                ));
            }
        }
        Ok(loads)
    }

    /// The checks of group `g` once the system went quiet.
    fn check_group_quiet(&mut self, g: usize) {
        let loads = match self.active_per_pod(g) {
            Ok(loads) => loads,
            Err(what) => {
                self.world.violate(what);
                return;
            }
        };
        let (min, max) = (
            loads.values().min().copied().unwrap_or(0),
            loads.values().max().copied().unwrap_or(0),
        );
        // Balanced by throughput, shard counts need not be even: the band is
        // checked instead.
        let throughput = self.by_throughput(g);
        if max > min + 1 && !throughput {
            let label = self.label(g);
            self.world
                .violate(format!("quiet: {label}unbalanced loads {loads:?}"));
            return;
        }
        let books: &[BookAtRest] = if self.op.pooled() {
            &[BookAtRest::Kept, BookAtRest::Lost]
        } else {
            &[BookAtRest::Kept]
        };
        let mut kept = None;
        for &book in books {
            let again = self.op.plan_at_rest(g, book, &self.world, &mut self.rng);
            // What the standbys' limits let pass in a pool (`crate::standbys`).
            let limited = !self.standbys_dealt() || !self.standby_rows_attainable();
            if self.op.pooled() && limited && self.only_standbys_change(g, &again) {
                let notes = &mut self.pool_notes;
                match book {
                    BookAtRest::Kept => notes.standby_replans += 1,
                    BookAtRest::Lost => notes.new_leader_standby_rewrites += 1,
                }
                continue;
            }
            if again.document_write.is_some() || again.moves != Moves::default() {
                let label = self.label(g);
                let after = match book {
                    BookAtRest::Kept => "",
                    BookAtRest::Lost => " for a new leader (its book of the pool's balance empty)",
                };
                self.world.violate(format!(
                    "quiet: {label}planning again{after} still changes the document"
                ));
                return;
            }
            kept.get_or_insert(again);
        }
        if throughput {
            let status = kept.and_then(|again| again.status.throughput.clone());
            self.check_load_quiet(g, status);
        }
    }
}
