//! The step that advances the records: for every shard of the topology, the
//! record to publish given the engine's owner and the previous record (stay,
//! start a revoke, keep revoking, or complete the handoff on evidence), and
//! the engine's view of the previous assignment that the plan feeds it.

use std::collections::{BTreeMap, BTreeSet};

use super::clocks::{Timing, drain_clocks, graceful_pods, remembered_deliveries};
use super::plain::{Skips, same_range};
use super::step_context::{Completed, Ctx, HandoffResult, HoldEnded, Revoke};
use crate::crds::{AssignmentDocument, Handoff, HashKeyRange, ReturnHold, ShardPhase, ShardRecord};
use crate::document::{NextRecord, NextRecords};
use crate::engine::{PlanOutput, Previous, Shard, ShardAssignment, ShardState};
use crate::identity::{Identities, Returning};
use crate::observation::{Observation, PodInfo};
use crate::sorted_cursor::SortedCursor;
use crate::topology::Topology;

/// The engine's view of the previous assignment: an `Active` shard is on its
/// owner; a `Revoking` shard is on its destination (so the engine neither
/// re-plans nor re-counts a move already decided), or unplaced when it has
/// none yet; a `Held` shard is on the pod it waits for.
pub(crate) fn engine_previous(
    published: Option<&AssignmentDocument>,
) -> BTreeMap<String, Previous> {
    let Some(doc) = published else {
        return BTreeMap::new();
    };
    doc.shards
        .iter()
        .filter_map(|(id, r)| {
            let owner = match r.state {
                ShardPhase::Active | ShardPhase::Held => r.owner.clone()?,
                ShardPhase::Revoking => r.handoff.as_ref()?.to.clone()?,
                ShardPhase::Pending | ShardPhase::Complete => return None,
            };
            let prev = if r.standbys.is_empty() {
                Previous::Owner(owner)
            } else {
                Previous::Full {
                    owner,
                    standbys: r.standbys.clone(),
                }
            };
            Some((id.clone(), prev))
        })
        .collect()
}

/// Runs the handoff step for one plan: its bookkeeping, and the shard
/// records to publish (sorted by id, each id once), those equal to their
/// published record borrowed from it.
///
/// With `skips` (of `published`, the document the engine planned from:
/// [`super::skips`]), only the records they name are looked at; every other
/// is a plain record the engine left where it was, kept as it is.
#[allow(clippy::too_many_arguments)] // the step's inputs, each once
pub(crate) fn step<'a>(
    obs: &Observation,
    timing: Timing,
    topology: &'a Topology,
    output: &PlanOutput,
    published: Option<&'a AssignmentDocument>,
    kept_epoch: u64,
    identities: &Identities,
    skips: Option<Skips<'a>>,
) -> (HandoffResult, NextRecords<'a>) {
    let now = obs.now;
    let current = obs.group.status.clone().unwrap_or_default();
    let pods: BTreeMap<&str, &PodInfo> = obs.pods.iter().map(|p| (p.name.as_str(), p)).collect();
    let graceful = graceful_pods(&current.graceful_pods, &obs.pods);
    let annotations = obs.group.publishes_pod_annotations();
    let drain = drain_clocks(
        &remembered_deliveries(&current),
        published,
        &pods,
        annotations,
        now,
    );
    let ctx = Ctx {
        obs,
        timing,
        pods: &pods,
        graceful: &graceful,
        drain: &drain,
        // A revoke started now is first published in the next document
        // (it changes the content, so the epoch moves).
        next_epoch: kept_epoch + 1,
        // Revokes of a document written before records carried their epoch
        // were published at this epoch at the latest.
        published_epoch: published
            .filter(|d| d.epoch > 0)
            .map_or(kept_epoch, |d| d.epoch),
        identities,
    };
    let pending: BTreeSet<&str> = output.pending.iter().map(String::as_str).collect();
    let mut result = HandoffResult::default();
    // The engine's assignment and the published records are maps sorted by
    // shard id: walking the shards in id order joins all three in one pass,
    // without a map lookup per shard (at 20,000 shards the lookups and the
    // one-by-one inserts were a third of the plan), and the records come
    // out sorted, as the document lists them.
    let mut records: NextRecords<'a> = Vec::with_capacity(topology.shards.len());
    if let (Some(skips), Some(published)) = (skips, published) {
        let mut check = skips.check.iter().peekable();
        for ((id, previous), shard) in published.shards.iter().zip(skips.sorted) {
            if check.next_if(|c| std::ptr::eq(**c, id)).is_none() {
                records.push((&shard.id, NextRecord::Kept(previous)));
                continue;
            }
            let target = output.assignment.get(id);
            let record = ctx.next_record(shard, target, Some(previous), &pending, &mut result);
            records.push((&shard.id, record));
        }
        let stepped = finish(&ctx, result, records);
        // The whole step, looking at every record: what a step with skips
        // must equal.
        debug_assert!(
            stepped
                == step(
                    obs,
                    timing,
                    topology,
                    output,
                    Some(published),
                    kept_epoch,
                    identities,
                    None
                ),
            "a step that skipped plain records differs from the whole step"
        );
        return stepped;
    }
    let mut assigned = SortedCursor::new(output.assignment.iter());
    let mut published_records = SortedCursor::new(published.into_iter().flat_map(|d| &d.shards));
    for shard in topology.sorted_by_id() {
        let target = assigned.get(&shard.id);
        let previous = published_records.get(&shard.id);
        let record = ctx.next_record(shard, target, previous, &pending, &mut result);
        // A repeated id keeps its last record.
        match records.last_mut() {
            Some((id, last)) if *id == shard.id => *last = record,
            _ => records.push((&shard.id, record)),
        }
    }
    finish(&ctx, result, records)
}

/// The step's bookkeeping once every record is decided: when to look
/// again for a hold's end, and the graceful pods and drain clocks of the
/// pods that still hold revoking shards.
fn finish<'a>(
    ctx: &Ctx<'_>,
    mut result: HandoffResult,
    records: NextRecords<'a>,
) -> (HandoffResult, NextRecords<'a>) {
    if let Some(deadline) = ctx.identities.next_deadline() {
        let wait = deadline.duration_since(ctx.obs.now).unsigned_abs();
        result.next_check = Some(result.next_check.map_or(wait, |w| w.min(wait)));
    }
    // A record kept as published is `Active` without a handoff: only the
    // new ones can be revoking.
    let new_records = || {
        records.iter().filter_map(|(_, r)| match r {
            NextRecord::New(record) => Some(record),
            NextRecord::Kept(_) => None,
        })
    };
    // Keep only the bookkeeping of pods that still hold revoking shards.
    let holders: BTreeSet<&str> = new_records()
        .filter(|r| r.state == ShardPhase::Revoking)
        .filter_map(|r| r.owner.as_deref())
        .collect();
    result.graceful_pods = ctx
        .graceful
        .iter()
        .filter(|p| holders.contains(p.as_str()))
        .cloned()
        .collect();
    result.drain_deliveries = ctx
        .drain
        .iter()
        .filter(|(p, _)| holders.contains(p.as_str()))
        .map(|(p, d)| (p.clone(), d.clone()))
        .collect();
    let revokes = || {
        new_records()
            .filter_map(|r| r.handoff.as_ref())
            .map(|h| h.since)
    };
    (result.oldest_revoke, result.youngest_revoke) = (revokes().min(), revokes().max());
    (result, records)
}

/// Records in `result` the end of the hold `previous` carried, when
/// `record` no longer carries it (for the same pod).
fn note_hold_end(
    shard: &str,
    previous: Option<&ShardRecord>,
    record: &ShardRecord,
    result: &mut HandoffResult,
) {
    let Some((pod, hold)) =
        previous.and_then(|p| Some((p.owner.as_deref()?, p.return_hold.as_deref()?)))
    else {
        return;
    };
    if record.return_hold.is_some() && record.owner.as_deref() == Some(pod) {
        return;
    }
    result.holds_ended.push(HoldEnded {
        shard: shard.to_owned(),
        pod: pod.to_owned(),
        since: hold.since,
        returned: record.state == ShardPhase::Active && record.owner.as_deref() == Some(pod),
    });
}

/// Fills `record` for a shard nobody reads any more: `Held` for `owner`
/// when the plan waits for it (`waits_for`), else `Active` on it.
fn hold_or_activate(
    record: &mut ShardRecord,
    owner: Option<String>,
    standbys: Vec<String>,
    waits_for: Option<&Returning>,
) {
    record.state = if waits_for.is_some() {
        ShardPhase::Held
    } else {
        ShardPhase::Active
    };
    record.return_hold = waits_for.map(return_hold);
    record.owner = owner;
    record.standbys = standbys;
}

/// The record of a hold for `returning`.
fn return_hold(returning: &Returning) -> Box<ReturnHold> {
    Box::new(ReturnHold {
        since: returning.since,
        until: returning.until,
        uid: returning.uid.clone(),
    })
}

impl Ctx<'_> {
    /// `shard`'s next record, from the engine's placement (`target`) and
    /// its published record (`previous`): most shards stay where they are,
    /// and their published record is kept as it is, without building (and
    /// comparing) a copy of it.
    fn next_record<'r>(
        &self,
        shard: &Shard,
        target: Option<&ShardAssignment>,
        previous: Option<&'r ShardRecord>,
        pending: &BTreeSet<&str>,
        result: &mut HandoffResult,
    ) -> NextRecord<'r> {
        let readable = shard.state != ShardState::Complete && !pending.contains(shard.id.as_str());
        match (previous, target) {
            (Some(previous), Some(target))
                if readable && self.stays_as(shard, previous, target) =>
            {
                if cfg!(debug_assertions) {
                    // What the step would have done, rebuilt: every test
                    // and simulation checks the shortcut against it (the
                    // record equal to the published one, nothing noted).
                    let mut noted = HandoffResult::default();
                    let rebuilt =
                        self.record(shard, true, Some(target), Some(previous), &mut noted);
                    assert_eq!(rebuilt, *previous, "shard {} kept", shard.id);
                    assert!(
                        noted.completed.is_empty()
                            && noted.revokes_started == 0
                            && noted.holds_ended.is_empty()
                            && noted.next_check.is_none(),
                        "shard {} kept: {noted:?}",
                        shard.id
                    );
                }
                NextRecord::Kept(previous)
            }
            _ => NextRecord::New(Box::new(
                self.record(shard, readable, target, previous, result),
            )),
        }
    }

    /// Whether the step leaves `shard`'s published record `previous` as it
    /// is: a readable shard the engine keeps on its active owner (`target`),
    /// nobody waited for, with the same standbys, parents and hash key
    /// range, and no handoff or hold to end. Exactly the records
    /// [`Ctx::record`] would rebuild equal to `previous`, decided without
    /// building one (most shards of a plan; see the tests).
    fn stays_as(&self, shard: &Shard, previous: &ShardRecord, target: &ShardAssignment) -> bool {
        let Some(owner) = previous.owner.as_deref() else {
            return false;
        };
        previous.state == ShardPhase::Active
            && previous.handoff.is_none()
            && previous.return_hold.is_none()
            && target.owner.as_deref() == Some(owner)
            && self.identities.hold_for(owner).is_none()
            && previous.parents == shard.parents
            && same_range(
                previous.hash_key_range.as_deref(),
                shard.hash_key_range.as_ref(),
            )
            && previous.standbys.iter().map(String::as_str).eq(target
                .standbys
                .iter()
                .map(String::as_str)
                .filter(|s| self.identities.hold_for(s).is_none()))
    }

    /// Builds `shard`'s next record from the engine's placement (`target`)
    /// and its published record (`previous`), noting in `result` what
    /// started, completed or ended.
    fn record(
        &self,
        shard: &Shard,
        readable: bool,
        target: Option<&ShardAssignment>,
        previous: Option<&ShardRecord>,
        result: &mut HandoffResult,
    ) -> ShardRecord {
        let mut record = ShardRecord {
            parents: shard.parents.clone(),
            hash_key_range: shard.hash_key_range.as_ref().map(|r| {
                Box::new(HashKeyRange {
                    start: r.start.clone(),
                    end: r.end.clone(),
                })
            }),
            ..Default::default()
        };
        if shard.state == ShardState::Complete {
            record.state = ShardPhase::Complete;
        } else if !readable {
            record.state = ShardPhase::Pending;
        } else {
            let owner = target.and_then(|a| a.owner.clone());
            let standbys = target.map(|a| a.standbys.clone()).unwrap_or_default();
            self.place(&shard.id, previous, owner, standbys, &mut record, result);
        }
        note_hold_end(&shard.id, previous, &record, result);
        record
    }

    /// Fills `record` for a readable shard the engine placed on `owner`.
    /// A shard placed on a pod that is away and waited for is never made
    /// active: it is revoked from whoever reads it, and held once they let
    /// go (or at once when nobody reads it).
    fn place(
        &self,
        id: &str,
        previous: Option<&ShardRecord>,
        owner: Option<String>,
        mut standbys: Vec<String>,
        record: &mut ShardRecord,
        result: &mut HandoffResult,
    ) {
        let now = self.obs.now;
        // A pod that is away backs nothing up.
        standbys.retain(|s| self.identities.hold_for(s).is_none());
        let waits_for = owner.as_deref().and_then(|o| self.identities.hold_for(o));
        let read = previous.and_then(|p| match p.state {
            ShardPhase::Active | ShardPhase::Revoking => p.owner.clone().map(|o| (o, p)),
            ShardPhase::Pending | ShardPhase::Complete | ShardPhase::Held => None,
        });
        let Some((from, prev)) = read else {
            // Nobody reads it: held for the pod it waits for, or published
            // active at once.
            hold_or_activate(record, owner, standbys, waits_for);
            return;
        };
        if owner.as_deref() == Some(from.as_str()) && waits_for.is_none() {
            let other_pod_back = prev.state == ShardPhase::Revoking
                && prev.return_hold.as_ref().is_some_and(|hold| {
                    hold.uid.as_deref().is_some_and(|uid| {
                        self.pods.get(from.as_str()).is_some_and(|p| p.uid != uid)
                    })
                });
            if !other_pod_back {
                // Stays (or a revoke is called off: its owner is wanted
                // again, nobody else was given the shard, and it is the pod
                // object it was revoked from). A checkpoint handed over with
                // it stays while it does.
                if prev.state == ShardPhase::Active {
                    record.checkpoint.clone_from(&prev.checkpoint);
                }
                record.state = ShardPhase::Active;
                record.owner = owner;
                record.standbys = standbys;
                return;
            }
            // Another pod of the name is back before the one the shard was
            // revoked from was seen letting go: the revoke runs on.
        }
        let (since, epoch, lease_counter) = match (&prev.state, &prev.handoff) {
            (ShardPhase::Revoking, Some(h)) if h.epoch > 0 => (h.since, h.epoch, h.lease_counter),
            (ShardPhase::Revoking, Some(h)) => (h.since, self.published_epoch, h.lease_counter),
            (ShardPhase::Revoking, None) => (now, self.published_epoch, None),
            _ => {
                result.revokes_started += 1;
                (now, self.next_epoch, self.lease_counter(&from, id))
            }
        };
        let revoke = Revoke {
            since,
            epoch,
            lease_counter,
        };
        if prev.state == ShardPhase::Revoking
            && let Some(evidence) = self.evidence(&from, id, revoke, result)
        {
            // The checkpoint the owner acknowledged goes to the next,
            // whichever evidence came first.
            record.checkpoint = self
                .acked_checkpoint(&from, id, revoke)
                .map(|checkpoint| Box::new(checkpoint.to_owned()));
            result.completed.push(Completed {
                shard: id.to_owned(),
                from,
                to: owner.clone(),
                evidence,
                duration: now.duration_since(since).unsigned_abs(),
            });
            hold_or_activate(record, owner, standbys, waits_for);
            return;
        }
        record.state = ShardPhase::Revoking;
        record.standbys = standbys.into_iter().filter(|s| *s != from).collect();
        // Held for its own owner (away, waited for), or for the pod that
        // came back under its name: the hold runs on until it ends.
        record.return_hold = waits_for.map(return_hold).or_else(|| {
            (owner.as_deref() == Some(from.as_str()))
                .then(|| prev.return_hold.clone())
                .flatten()
        });
        record.owner = Some(from);
        record.handoff = Some(Box::new(Handoff {
            to: owner,
            since,
            epoch,
            lease_counter,
        }));
    }
}
