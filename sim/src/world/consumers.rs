//! The consumers of the simulated world, following the contract (a pod's
//! process runs one per group of its pool): each acts only on the newest
//! view of its group it has seen, reads only `active` shards, takes a
//! lease before reading (with a lease table), stops, checkpoints and
//! releases as soon as a shard is no longer active, fences itself when it
//! cannot renew, and reads records in order from the last checkpoint. With
//! acknowledgements on, it tells the operator's endpoint each time it looks
//! at its view which revoked shards it does not read (some are lost on the
//! way, each is late by its own delay, at the epoch of the view it saw). The
//! invariants on readers are checked here, as records are read.

use std::collections::{BTreeMap, BTreeSet};

use super::{Checkpoint, LeaseRow, LeaseWrite, Reading, World};
use crate::crds::PodView;
use crate::rng::Rng;

impl World {
    /// Runs every live consumer process once.
    pub fn run_consumers(&mut self, rng: &mut Rng) {
        for i in 0..self.pods.len() {
            if self.pods[i].process.is_some() {
                self.run_consumer(i, rng);
            }
        }
        self.check_readers();
    }

    fn run_consumer(&mut self, i: usize, rng: &mut Rng) {
        let now = self.now;
        let rules = self.rules;
        let cut = self.partitioned(self.pods[i].node);
        let name = self.pods[i].name.clone();
        let mut c = self.pods[i].process.take().expect("a process");
        let mut refreshed = false;
        // 1. Look at the annotations (not when cut off from the API): the
        // downward API shows them all at once.
        if now >= c.next_refresh && !cut {
            refreshed = true;
            c.next_refresh = now + rng.range(100, rules.max_refresh);
            for (group, view) in c.views.iter_mut().enumerate() {
                match self.pods[i].annotations.get(&group) {
                    Some(a) => {
                        if let Ok(seen) = PodView::from_annotation(a)
                            && seen.epoch >= view.epoch
                        {
                            *view = seen;
                        }
                    }
                    // No annotation: this pod has no shards of the group (it
                    // left the assignment), whatever it saw before.
                    None => {
                        view.active.clear();
                        view.revoking.clear();
                    }
                }
            }
        }
        // 2. Stop what is no longer active (and fence on failed renewals).
        let active: BTreeSet<String> = c.views.iter().flat_map(|v| v.active.clone()).collect();
        let stale: Vec<String> = c
            .reading
            .iter()
            .filter(|(s, r)| {
                !active.contains(*s) || (self.leased(s) && now - r.renewed >= rules.failover / 2)
            })
            .map(|(s, _)| s.clone())
            .collect();
        for shard in stale {
            let r = c.reading.remove(&shard).expect("reading");
            self.stop(&name, &shard, Checkpoint::At(r.pos), rng, cut);
        }
        // 2b. Acknowledge the release of every revoked shard it does not
        // read (it just stopped them, or never started them), each time it
        // looks at its view: an ack lost on the way, or forgotten by an
        // operator that crashed, goes again while the view still revokes.
        if rules.acks && refreshed {
            self.send_acks(i, &c, rng);
        }
        // 3. Renew leases.
        if self.any_lease_table() && now >= c.next_renew && !cut {
            c.next_renew = now + rng.range(500, 1500);
            let mut lost = Vec::new();
            for (shard, r) in c.reading.iter_mut() {
                if !self.leased(shard) {
                    continue;
                }
                match self.leases.get_mut(shard) {
                    Some(row) if row.owner.as_deref() == Some(name.as_str()) => {
                        row.counter += 1;
                        row.changed = now;
                        r.renewed = now;
                    }
                    _ => lost.push(shard.clone()),
                }
            }
            for shard in lost {
                c.reading.remove(&shard);
            }
        }
        // 4. Start active shards (not while terminating and nothing active).
        for shard in c.views.iter().flat_map(|v| &v.active) {
            if c.reading.contains_key(shard) || !self.stream.iter().any(|s| &s.id == shard) {
                continue;
            }
            if let Some(pos) = self.acquire(&name, shard, cut) {
                self.check_parents(shard);
                c.reading
                    .insert(shard.clone(), Reading { pos, renewed: now });
            }
        }
        // 5. Read some records, in order.
        let shards: Vec<String> = c.reading.keys().cloned().collect();
        for shard in shards {
            let Some(s) = self.stream.iter().find(|s| s.id == shard).cloned() else {
                continue;
            };
            let r = c.reading.get_mut(&shard).expect("reading");
            let to = (r.pos + rng.range(0, 5).unsigned_abs()).min(s.records);
            if to > r.pos {
                let from = r.pos;
                r.pos = to;
                self.read(&shard, from, to);
            }
            if !s.open && r.pos >= s.records {
                // Shard end: checkpoint SHARD_END and let go.
                c.reading.remove(&shard);
                self.stop(&name, &shard, Checkpoint::End, rng, cut);
            } else if rng.chance(0.1) {
                let pos = c.reading[&shard].pos;
                self.checkpoint(&name, &shard, Checkpoint::At(pos), rng, cut);
            }
        }
        // 6. A terminating consumer exits once it holds nothing.
        let done =
            c.terminating && c.reading.is_empty() && c.views.iter().all(|v| v.active.is_empty());
        if done {
            self.pods[i].kill_at = Some(now);
        }
        self.pods[i].process = Some(c);
    }

    /// Sends a release acknowledgement for each shard `c`'s views revoke and
    /// it does not read, to its group's route; some are lost, each arrives
    /// after its own delay.
    fn send_acks(&mut self, i: usize, c: &super::Consumer, rng: &mut Rng) {
        for (group, view) in c.views.iter().enumerate() {
            for shard in &view.revoking {
                if c.reading.contains_key(shard) || rng.chance(0.1) {
                    continue;
                }
                let ack = shardring_core::observation::ReleaseAck {
                    pod: self.pods[i].name.clone(),
                    uid: self.pods[i].uid.clone(),
                    epoch: view.epoch,
                    checkpoint: None,
                    at: crate::operator::ts(self.now),
                };
                self.ack_queue.push(super::AckInFlight {
                    at: self.now + rng.range(5, 400),
                    group,
                    shard: shard.clone(),
                    ack,
                });
            }
        }
    }

    /// Takes the lease (or, without a lease table, just reads the
    /// checkpoint); the position to read from, or `None`.
    fn acquire(&mut self, me: &str, shard: &str, cut: bool) -> Option<u64> {
        let now = self.now;
        let rules = self.rules;
        let leased = self.leased(shard);
        let row = self.leases.entry(shard.to_owned()).or_insert(LeaseRow {
            owner: None,
            counter: 0,
            changed: now,
            checkpoint: Checkpoint::At(0),
        });
        let pos = match row.checkpoint {
            Checkpoint::End => return None,
            Checkpoint::At(p) => p,
        };
        if !leased {
            return Some(pos);
        }
        if cut {
            return None;
        }
        let free = row.owner.is_none()
            || row.owner.as_deref() == Some(me)
            || now - row.changed >= rules.failover;
        if !free {
            return None;
        }
        row.owner = Some(me.to_owned());
        row.counter += 1;
        row.changed = now;
        Some(pos)
    }

    fn checkpoint(&mut self, me: &str, shard: &str, cp: Checkpoint, rng: &mut Rng, cut: bool) {
        self.write_lease(me, shard, cp, false, rng, cut);
    }

    fn stop(&mut self, me: &str, shard: &str, cp: Checkpoint, rng: &mut Rng, cut: bool) {
        self.write_lease(me, shard, cp, true, rng, cut);
    }

    fn write_lease(
        &mut self,
        me: &str,
        shard: &str,
        cp: Checkpoint,
        release: bool,
        rng: &mut Rng,
        cut: bool,
    ) {
        if !self.leased(shard) {
            // The checkpoint store without leases: written at once.
            if let Some(row) = self.leases.get_mut(shard)
                && row.checkpoint != Checkpoint::End
            {
                row.checkpoint = cp;
            }
            return;
        }
        if cut {
            return; // DynamoDB unreachable: the write is lost.
        }
        let at = self.now + rng.range(0, self.rules.max_lease_lag);
        let counter = self.leases.get(shard).map_or(0, |row| row.counter);
        self.lease_queue.push(LeaseWrite {
            counter,
            at,
            shard: shard.to_owned(),
            owner: me.to_owned(),
            checkpoint: cp,
            release,
        });
    }

    /// Records `from..to` of `shard` as read; checks nothing was skipped.
    fn read(&mut self, shard: &str, from: u64, to: u64) {
        let high = self.high_water.get(shard).copied().unwrap_or(0);
        if from > high {
            self.violate(format!(
                "records {high}..{from} of {shard} skipped (read resumed at {from})"
            ));
        }
        self.counts.records_read += to - from;
        self.counts.records_repeated += high.min(to).saturating_sub(from);
        self.high_water.insert(shard.to_owned(), high.max(to));
    }

    fn check_parents(&mut self, shard: &str) {
        let parents = self
            .stream
            .iter()
            .find(|s| s.id == shard)
            .map(|s| s.parents.clone())
            .unwrap_or_default();
        for p in parents {
            if !self.complete(&p) {
                self.violate(format!(
                    "child {shard} read before its parent {p} completed"
                ));
            }
        }
    }

    /// Never two processes reading one shard.
    fn check_readers(&mut self) {
        let mut readers: BTreeMap<&str, &str> = BTreeMap::new();
        let mut clash = None;
        for pod in &self.pods {
            let Some(c) = &pod.process else { continue };
            for shard in c.reading.keys() {
                if let Some(other) = readers.insert(shard, &pod.name) {
                    clash = Some(format!("{shard} read by {other} and {} at once", pod.name));
                }
            }
        }
        if let Some(what) = clash {
            self.violate(what);
        }
    }
}
