//! Plan: the pure heart of a reconcile. From one [`Observation`] it decides
//! the document to publish (if it changed), the pod annotations to write or
//! remove, the status, the Events and when to look again. No I/O and no
//! clock: the same observation always gives the same [`Decision`].
//!
//! Safety rules kept here: a missing pool, a pool with no ready pods, a
//! failed topology read or an engine error never touch the published
//! document or the annotations: the last assignment stays in place and the
//! status says why. A failed read with a known topology plans on the last good
//! one (the document never shrinks because of a read error).
//!
//! This file holds the plan itself; `plan/inputs.rs` the checks that block
//! it and the engine run, `plan/hold.rs` the hold of a group's first
//! publish, `plan/outcome.rs` what it reports into the status and Events,
//! `plan/requeue.rs` when to look again, `plan/throughput.rs` the measured
//! loads (`balance: throughput`, the scaling signal), `plan/copy_ahead.rs`
//! when the published document is copied beside the engine.

#[cfg(test)]
mod bookkeeping_tests;
mod copy_ahead;
mod eligible;
mod hold;
mod inputs;
mod outcome;
mod requeue;
pub(crate) mod throughput;
mod unpaced;
#[cfg(test)]
mod written_tests;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use self::copy_ahead::copies_ahead;
use self::inputs::{Engined, Inputs, inputs, pace, run_engine};
use self::outcome::{
    moves_in_flight, note_oversized, protocol_status, published_message, record_assignment,
    stale_message,
};
use self::requeue::{MIN_REQUEUE, next_requeue, requeue_after};
use self::unpaced::{deferred_by_budget, rebalances_unpaced};
use crate::codec;
use crate::conditions::reason;
use crate::crds::{AssignmentDocument, ShardGroupStatus};
use crate::document::written::{self, WrittenAnnotations};
use crate::document::{self, AnnotationWrite, PublishedCopy};
use crate::engine::{self, PlanInput, PlanOutput};
use crate::events::EventNote;
use crate::handoff;
use crate::observation::{LeaseObservation, Observation};
use crate::status::{self, Outcome, Problem};
use crate::topology::Topology;

pub use self::eligible::eligible;
pub(crate) use self::inputs::engine_pods;
pub use self::requeue::{EVIDENCE_POLL, IN_FLIGHT_POLL};

/// How many plans on one [`PlanMemory`] took each of its shortcuts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shortcuts {
    /// The engine patched its last output.
    pub engine_patched: u64,
    /// The handoff step looked only at the records that are not plain.
    pub step_skipped: u64,
}

/// What one reconcile should do.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The document to publish, when its content changed.
    pub document_write: Option<DocumentWrite>,
    /// Pods whose annotation must change, sorted by pod name.
    pub annotation_writes: Vec<AnnotationWrite>,
    /// The status the group has once the decision is applied, and whether
    /// that takes a write.
    pub status: StatusWrite,
    /// Events to publish.
    pub events: Vec<EventNote>,
    /// When to reconcile again without a watch event.
    pub requeue_after: Duration,
    /// Moves decided in this plan.
    pub moves: Moves,
    /// Handoffs completed in this plan (for the handoff metrics).
    pub handoffs: Vec<handoff::Completed>,
    /// Holds for returning pods that ended in this plan (for the metric of
    /// seconds held unread).
    pub holds_ended: Vec<handoff::HoldEnded>,
}

/// A document to publish, with the form the ConfigMap carries it in.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentWrite {
    /// The document (its epoch already increased), shared with whoever
    /// keeps it once written (the operator's decoded-document cache).
    pub document: Arc<AssignmentDocument>,
    /// `document` encoded (and compressed) once, by the plan step, where its
    /// size is checked; written as is.
    pub encoded: codec::EncodedDocument,
}

/// The status a decision leaves the group with, and whether it differs
/// from the observed one (only then is it written). Built from both, so
/// the two always agree; reads as the status itself.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    status: ShardGroupStatus,
    changed: bool,
    /// What changed is bookkeeping only ([`bookkeeping_only`]).
    bookkeeping: bool,
}

impl StatusWrite {
    /// `status`, to be written unless the group already has it
    /// (`observed`).
    pub fn new(observed: Option<&ShardGroupStatus>, status: ShardGroupStatus) -> Self {
        let changed = observed != Some(&status);
        let bookkeeping = changed && observed.is_some_and(|o| bookkeeping_only(o, &status));
        Self {
            status,
            changed,
            bookkeeping,
        }
    }

    /// The status to write, when it differs from the observed one.
    pub fn write(&self) -> Option<&ShardGroupStatus> {
        self.changed.then_some(&self.status)
    }

    /// Whether the write only updates what the status shows of the pods
    /// and the load, and when the pods last changed: nothing a consumer,
    /// a condition or the handoff protocol acts on. The operator may hold
    /// such a write back for a moment (the groups of a pool all get one at
    /// every pod event, and the documents that changed go first).
    pub fn only_bookkeeping(&self) -> bool {
        self.bookkeeping
    }

    /// The status, whether or not it takes a write.
    pub fn into_status(self) -> ShardGroupStatus {
        self.status
    }
}

impl std::ops::Deref for StatusWrite {
    type Target = ShardGroupStatus;

    fn deref(&self) -> &ShardGroupStatus {
        &self.status
    }
}

/// Whether `next` differs from `observed` only in what the status shows
/// of the pods and the load (counts, the load strings, the pool balance it
/// is part of), when the pods last changed, and the text or transition
/// times of conditions whose status and reason stay: none of it is acted
/// on by a consumer, an alert on a condition, or the handoff protocol. (A
/// restarted operator that reads an older pod change counts its rebalance
/// delay from a little later.)
pub fn bookkeeping_only(observed: &ShardGroupStatus, next: &ShardGroupStatus) -> bool {
    let masked = |status: &ShardGroupStatus| {
        let mut status = status.clone();
        status.pods = Default::default();
        status.load = None;
        status.min_load = 0;
        status.max_load = 0;
        status.last_pod_change = None;
        status.pod_set_digest = None;
        status.pool_balance = None;
        status.conditions.clear();
        status
    };
    let kinds = |status: &ShardGroupStatus| -> Vec<(String, String, String, Option<i64>)> {
        status
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.observed_generation,
                )
            })
            .collect()
    };
    masked(observed) == masked(next) && kinds(observed) == kinds(next)
}

/// How many shards a plan moved, by why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moves {
    /// Moves that had to happen (the previous owner is gone or not
    /// eligible, or holds more than `maxShardsPerPod`).
    pub required: u64,
    /// Moves made only to balance.
    pub optional: u64,
    /// Optional moves the move budget (`rebalance.maxMovesPerWindow`) held
    /// back: the plan wanted them and used every move the window allows.
    pub deferred: u64,
}

/// What one ShardGroup's plans keep between them, owned by the caller (the
/// operator keeps one per group, the simulation and tests none): the
/// engine's last ring and shard table ([`engine::EngineMemory`]), the
/// chunks of the last document it encoded ([`codec::EncodeCache`]), and
/// what it knows of the last document it published or planned from. No
/// decision depends on it: [`plan_with`] decides exactly as [`plan`] does,
/// and encodes the same bytes, only quicker.
#[derive(Debug, Clone, Default)]
pub struct PlanMemory {
    engine: engine::EngineMemory,
    encoding: codec::EncodeCache,
    /// The pods' annotations the last plan found written for their lists.
    written: WrittenAnnotations,
    /// The topology's shards the last plan planned on, to read the next
    /// published document's plain records against between events.
    topology: Weak<Vec<engine::Shard>>,
    /// Plans whose handoff step looked only at the records that are not
    /// plain ([`Self::shortcuts`]).
    steps_skipped: u64,
    /// What it knows of the last document it published or planned from.
    known: KnownDocument,
}

/// What the plan step knows of one document (the last it published, or the
/// published one it last planned from), held weakly: while it lives, a
/// document at its address is that one; a different document replaces
/// everything known of this one.
#[derive(Debug, Clone, Default)]
struct KnownDocument {
    of: Weak<AssignmentDocument>,
    /// Its pod lists index its shards: this step built it, or checked it.
    indexed: bool,
    /// The engine's view of its assignment ([`handoff::engine_previous`]),
    /// once read: at 20,000 shards about 2 MiB, rebuilt by every plan
    /// before it was kept.
    previous: Option<Arc<engine::PreviousAssignment>>,
    /// The encode cache's last encode is of it: the next document, built
    /// from it, is encoded from its chunks and the [`codec::Changes`]. (An
    /// encode that failed since, of a document too large to publish, left
    /// the cache with another document's chunks: the cache knows which
    /// document's they are and then encodes the whole document.)
    encoded: bool,
    /// A copy of its records and pod lists for the next document to patch
    /// ([`PlanMemory::prepare`]), until a plan takes it.
    copy: Option<PublishedCopy>,
    /// Which of its records are not plain ([`handoff::PlainRecords`]), read
    /// against the topology of the last plan: the step of a plan from it
    /// looks only at those and at what the engine changed.
    plain: Option<handoff::PlainRecords>,
}

impl PlanMemory {
    /// What is known of `doc`: nothing yet when it is not the document
    /// known (the stale knowledge, and its view, freed at once).
    fn known(&mut self, doc: &Arc<AssignmentDocument>) -> &mut KnownDocument {
        if !self
            .known
            .of
            .upgrade()
            .is_some_and(|known| Arc::ptr_eq(&known, doc))
        {
            self.known = KnownDocument {
                of: Arc::downgrade(doc),
                ..KnownDocument::default()
            };
        }
        &mut self.known
    }

    /// The engine's view of `previous_doc`: the one kept when it is the
    /// published document, else read afresh.
    fn engine_previous(
        &mut self,
        obs: &Observation,
        previous_doc: Option<&AssignmentDocument>,
    ) -> Arc<engine::PreviousAssignment> {
        let published = obs.published.shared_document().filter(|doc| {
            previous_doc.is_some_and(|previous| std::ptr::eq(doc.as_ref(), previous))
        });
        match published {
            Some(published) => Arc::clone(
                self.known(published)
                    .previous
                    .get_or_insert_with(|| Arc::new(handoff::engine_previous(previous_doc))),
            ),
            None => Arc::new(handoff::engine_previous(previous_doc)),
        }
    }

    /// Whether `published`'s pod lists are known to index its shards.
    fn knows_indexed(&mut self, published: Option<&Arc<AssignmentDocument>>) -> bool {
        published.is_some_and(|doc| self.known(doc).indexed)
    }

    /// Whether the encode cache's last encode is of `published`.
    fn knows_encoded(&mut self, published: Option<&Arc<AssignmentDocument>>) -> bool {
        published.is_some_and(|doc| self.known(doc).encoded)
    }

    /// How many plans on this memory took each shortcut: the engine
    /// patched its last output, and the handoff step looked only at the
    /// records that are not plain. The decisions are the same either way;
    /// only these (and the time a plan takes) tell, for the operator's log.
    pub fn shortcuts(&self) -> Shortcuts {
        Shortcuts {
            engine_patched: self.engine.patched(),
            step_skipped: self.steps_skipped,
        }
    }

    /// Prepares, once `published` is out and before the next event, what
    /// the next plan from it would otherwise build on the path from that
    /// event to its document: the engine's view of its assignment, and a
    /// copy of its records and pod lists for the next document to patch
    /// (at 20,000 shards the copy alone is a fifth of a join's plan, and
    /// on a busy machine its thread beside the engine slows both). Only
    /// for a document of [`copy_ahead::COPY_AHEAD_SHARDS`] shards or more:
    /// below that the plan builds both quicker than it keeps them. Nothing
    /// decides differently for it.
    pub fn prepare(&mut self, published: &Arc<AssignmentDocument>) {
        if !copy_ahead::worth_preparing(published) {
            return;
        }
        let known = self.known(published);
        let previous = Arc::clone(
            known
                .previous
                .get_or_insert_with(|| Arc::new(handoff::engine_previous(Some(published)))),
        );
        if known.copy.is_none() {
            known.copy = Some(PublishedCopy::of(published));
        }
        // Checked now that it is the engine's last output, which the next
        // plan then patches: not on that plan's way.
        self.engine.expect_previous(&previous);
        if let Some(shards) = self.topology.upgrade() {
            self.plain_records(published, &Topology { shards });
        }
    }

    /// `published`'s plain records read against `topology` (read now
    /// unless they were).
    fn plain_records(
        &mut self,
        published: &Arc<AssignmentDocument>,
        topology: &Topology,
    ) -> Option<&handoff::PlainRecords> {
        let known = self.known(published);
        if !known.plain.as_ref().is_some_and(|p| p.of(topology)) {
            known.plain = handoff::PlainRecords::read(published, topology);
        }
        known.plain.as_ref()
    }

    /// The copy of `published` [`Self::prepare`] made (or a plan left),
    /// taken.
    fn take_copy(&mut self, published: Option<&Arc<AssignmentDocument>>) -> Option<PublishedCopy> {
        published.and_then(|doc| self.known(doc).copy.take())
    }
}

/// What a plan is done with but did not free (at 20,000 shards the
/// engine's input and output are megabytes of small allocations, a
/// millisecond or two to free): the caller drops it once the document is on
/// its way rather than before.
#[derive(Default)]
pub struct Leftovers {
    _engine: Option<(Option<PlanInput>, PlanOutput)>,
}

/// Plans one reconcile of the observed ShardGroup.
pub fn plan(obs: &Observation) -> Decision {
    plan_with(obs, &mut PlanMemory::default()).0
}

/// [`plan`], with the group's [`PlanMemory`]: the same decision, and what
/// the plan is done with, to be dropped when it costs the caller nothing.
pub fn plan_with(obs: &Observation, memory: &mut PlanMemory) -> (Decision, Leftovers) {
    let published = obs.published.document();
    let status_epoch = obs.group.status.as_ref().map_or(0, |s| s.epoch);
    let remembered = handoff::trusted_memory(obs).map_or(0, |d| d.epoch);
    let kept_epoch = published
        .map_or(0, |d| d.epoch)
        .max(status_epoch)
        .max(remembered);
    let mut outcome = Outcome {
        epoch: kept_epoch,
        ..Default::default()
    };
    outcome.pods_with_shards = published.map_or(0, |d| d.pods.len() as u64);
    outcome.moves_in_flight = published.map_or(0, moves_in_flight);
    let requeue_after = requeue_after(obs);
    match plan_assignment(
        obs,
        published,
        kept_epoch,
        &mut outcome,
        requeue_after,
        memory,
    ) {
        Ok(planned) => planned,
        Err(problem) => {
            outcome.problem = Some(problem);
            (blocked(obs, outcome, requeue_after), Leftovers::default())
        }
    }
}

/// The plan when nothing blocks it: the engine's assignment turned into
/// records by the handoff step, the next document, the annotations, the
/// status and when to look again. `Err` is the problem that blocks it (the
/// document and annotations then stay as they are), with `outcome` holding
/// what was learned until then.
fn plan_assignment(
    obs: &Observation,
    published: Option<&AssignmentDocument>,
    kept_epoch: u64,
    outcome: &mut Outcome,
    requeue_after: Duration,
    memory: &mut PlanMemory,
) -> Result<(Decision, Leftovers), Problem> {
    let Inputs {
        pool,
        pods,
        topology,
        identities,
    } = inputs(obs, kept_epoch, outcome)?;
    let recovered = handoff::trusted_memory(obs)
        .cloned()
        .or_else(|| handoff::recover_previous(obs))
        .or_else(|| handoff::revoke_unknown_readers(obs, topology, kept_epoch));
    if kept_epoch == 0
        && published.is_none()
        && recovered.is_none()
        && let Some(hold) = hold::first_publish_hold(
            &obs.pods,
            pool.spec.min_ready(),
            obs.group.spec.rebalance.initial_delay().unwrap_or_default(),
            obs.now,
        )
    {
        outcome.held = Some(hold.message(pool.spec.min_ready()));
        let requeue_after = requeue_after.min(hold.next.max(MIN_REQUEUE));
        return Ok((
            blocked(obs, std::mem::take(outcome), requeue_after),
            Leftovers::default(),
        ));
    }
    let previous_doc = published.or(recovered.as_ref());
    let published_arc = obs.published.shared_document();
    memory.topology = Arc::downgrade(&topology.shards);
    // The published document's plain records, when the engine plans from
    // it: the step then skips them (cloned: a few ids, the records in
    // flight).
    let plain = published_arc
        .and_then(|doc| memory.plain_records(doc, topology))
        .cloned();
    let pacing = pace(obs, &pods, previous_doc);
    let prepared = memory.take_copy(published_arc);
    let copy_ahead = published.filter(|doc| prepared.is_none() && copies_ahead(obs, &pacing, doc));
    // The engine and the handoff step, with the published document copied
    // beside them when the plan is about to move some of its shards and
    // the memory had no copy prepared.
    let mut skipped = false;
    let (
        Engined {
            pacing,
            output,
            input,
        },
        step,
        (doc, changes),
        unused_copy,
    ) = std::thread::scope(|scope| -> Result<_, Problem> {
        let copying = copy_ahead.map(|doc| scope.spawn(move || PublishedCopy::of(doc)));
        let mut engined = run_engine(
            obs,
            pool,
            (pods, pacing),
            topology,
            memory.engine_previous(obs, previous_doc),
            &mut memory.engine,
        )?;
        outcome.deferred_moves =
            deferred_by_budget(&mut engined.input, &mut memory.engine, &engined.output);
        let skips = plain
            .as_ref()
            .zip(published)
            .and_then(|(plain, published)| {
                handoff::skips(
                    plain,
                    published,
                    topology,
                    &engined.output,
                    &identities,
                    obs.group.spec.standbys,
                )
            });
        skipped = skips.is_some();
        let (step, mut records) = handoff::step(
            obs,
            timing(obs),
            topology,
            &engined.output,
            previous_doc,
            kept_epoch,
            &identities,
            skips,
        );
        document::add_lineage(&mut records, &obs.topology.lineage);
        // A copy that failed is made again by `next_document`.
        let mut copy = prepared.or_else(|| copying.and_then(|copying| copying.join().ok()));
        let next = document::next_document(
            obs.group.qualified_name(),
            records,
            published,
            memory.knows_indexed(published_arc),
            kept_epoch,
            &mut copy,
        );
        Ok((engined, step, next, copy))
    })?;
    memory.steps_skipped += u64::from(skipped);
    // A copy the document was not built from is still one of the published
    // document: kept for the plan that changes it.
    if let (Some(copy), Some(published)) = (unused_copy, published_arc) {
        memory.known(published).copy = Some(copy);
    }
    // The input (a copy of the topology and of the previous assignment) is
    // kept only while the rebalance delay may call for a second, unpaced
    // engine run: at 20,000 shards it is megabytes the rest of the plan
    // does not need.
    let mut input = pacing.next_change.is_some().then_some(input);
    let changed = matches!(doc, Cow::Owned(_));
    // Changes to the published document, which the encode may start from
    // only when it is the one the cache encoded last.
    let encode_changes = changes
        .as_ref()
        .filter(|_| memory.knows_encoded(published_arc));
    if !changed && let Some(published) = published_arc {
        // Borrowed: its pod lists were found to index its shards.
        memory.known(published).indexed = true;
    }
    // The pods whose lists the next document may change from the published
    // one: the annotations found written for the others still are.
    let lists_changed = match &changes {
        _ if !changed => Some(&[][..]),
        Some(changes) => Some(changes.pods()),
        None => None,
    };
    let mut written = memory.written.lookup(published_arc, lists_changed);
    let (encoded, (annotation_writes, oversized)) = encode_beside_annotations(
        &doc,
        changed,
        kept_epoch,
        obs,
        (&mut memory.encoding, encode_changes),
        &mut written,
    );
    drop(written);
    let encoded = encoded.transpose()?;

    record_assignment(obs, outcome, topology, &output, &doc, changed);
    outcome.protocol = Some(protocol_status(obs, &pacing, &output, &step));
    outcome.measured_load = Some(throughput::report(obs, topology, &output, previous_doc));
    let young_revoke = match obs.leases {
        LeaseObservation::NotConfigured => None,
        _ => step
            .youngest_revoke
            .map(|since| obs.now.duration_since(since).unsigned_abs()),
    };
    let requeue_after = next_requeue(
        throughput::poll(obs).map_or(requeue_after, |poll| requeue_after.min(poll)),
        step.next_check,
        outcome.moves_in_flight,
        young_revoke,
        pacing.next_change,
        || {
            input
                .as_mut()
                .is_some_and(|input| rebalances_unpaced(input, &mut memory.engine))
        },
    );
    outcome.problem = obs.topology.error.as_ref().map(|error| Problem {
        reason: error.reason(),
        message: stale_message(obs, error),
        blocks_ready: false,
    });
    note_oversized(outcome, &oversized);

    outcome.completed = step.completed.clone();
    let (status, mut events) = status::build(obs, outcome);
    events.extend(hold_expired_events(&step.holds_ended, &identities));
    if changed {
        events.insert(
            0,
            EventNote::normal(
                reason::PUBLISHED,
                published_message(&doc, &output, published.is_none()),
            ),
        );
    }
    let document_write = encoded.map(|encoded| DocumentWrite {
        document: Arc::new(doc.into_owned()),
        encoded,
    });
    // The annotations were compared with the next document's lists: the
    // published one, or the one to publish (none when it cannot be).
    memory.written.found_in(match &document_write {
        Some(write) => Some(&write.document),
        None if changed => None,
        None => published_arc,
    });
    if let Some(write) = &document_write {
        // Built by `next_document`: its pod lists index its shards. And
        // encoded last: the next document's encode starts from it.
        let known = memory.known(&write.document);
        known.indexed = true;
        known.encoded = true;
    }
    let decision = Decision {
        document_write,
        annotation_writes,
        status: StatusWrite::new(obs.group.status.as_ref(), status),
        events,
        requeue_after,
        moves: Moves {
            required: output.required_moves(),
            optional: output.optional_moves(),
            deferred: outcome.deferred_moves,
        },
        handoffs: step.completed,
        holds_ended: step.holds_ended,
    };
    Ok((
        decision,
        Leftovers {
            _engine: Some((input, output)),
        },
    ))
}

/// A document at least this large is encoded on a thread of its own, beside
/// the annotations' comparison: at 20,000 shards its JSON and gzip are the
/// longest step of the plan after the engine, on the path from a pod event
/// to the published document. Below it, encoding costs less than starting
/// a thread.
const ENCODE_BESIDE_SHARDS: usize = 2_000;

/// A document encoded for its ConfigMap, or why it cannot be published.
type Encoded = Result<codec::EncodedDocument, Problem>;
/// The annotation writes a document calls for, and the views too large to
/// write.
type Annotations = (Vec<AnnotationWrite>, Vec<document::Oversized>);

/// The encoded document (when `changed`; `Err` when it cannot be published)
/// and the annotation writes it calls for, the two computed at once for a
/// large document. Either way the same result as one after the other.
/// `encoding` is the group's encode cache, and the changes to the document
/// it encoded last when `doc` is built from that one.
fn encode_beside_annotations(
    doc: &AssignmentDocument,
    changed: bool,
    kept_epoch: u64,
    obs: &Observation,
    (cache, changes): (&mut codec::EncodeCache, Option<&codec::Changes>),
    written: &mut written::Lookup<'_>,
) -> (Option<Encoded>, Annotations) {
    let key = obs.group.annotation_key();
    let mut annotations = || {
        if obs.group.publishes_pod_annotations() {
            document::annotation_writes_with(doc, &obs.pods, &key, Some(written))
        } else {
            document::annotation_removals(&obs.pods)
        }
    };
    if !changed || doc.shards.len() < ENCODE_BESIDE_SHARDS {
        let encoded = changed.then(|| encode(doc, kept_epoch, cache, changes));
        return (encoded, annotations());
    }
    std::thread::scope(|scope| {
        let encoding = scope.spawn(|| encode(doc, kept_epoch, cache, changes));
        let annotations = annotations();
        let encoded = encoding
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (Some(encoded), annotations)
    })
}

/// The handoff timing rules from the spec (checked valid before).
fn timing(obs: &Observation) -> handoff::Timing {
    handoff::Timing {
        drain_timeout: obs.group.spec.handoff.drain_timeout().unwrap_or_default(),
        lease_failover: obs.group.spec.handoff.lease_failover().unwrap_or_default(),
    }
}

/// `doc` as the ConfigMap carries it, or the problem when it cannot be
/// published (too large); from the chunks of the document `cache` encoded
/// last where `changes` to it are known.
fn encode(
    doc: &AssignmentDocument,
    kept_epoch: u64,
    cache: &mut codec::EncodeCache,
    changes: Option<&codec::Changes>,
) -> Result<codec::EncodedDocument, Problem> {
    match changes {
        Some(changes) => codec::encode_changed(doc, cache, changes),
        None => codec::encode_with(doc, cache),
    }
    .map_err(|error| Problem {
        reason: error.reason(),
        message: format!("{error}; the last assignment (epoch {kept_epoch}) stays in place"),
        blocks_ready: true,
    })
}

/// A decision that keeps the document and annotations as they are (a
/// problem blocks the plan, or the first publish is held).
fn blocked(obs: &Observation, outcome: Outcome, requeue_after: Duration) -> Decision {
    let (status, events) = status::build(obs, &outcome);
    Decision {
        document_write: None,
        annotation_writes: Vec::new(),
        status: StatusWrite::new(obs.group.status.as_ref(), status),
        events,
        requeue_after,
        moves: Moves::default(),
        handoffs: Vec::new(),
        holds_ended: Vec::new(),
    }
}

/// One Event per pod whose hold ended without it: how many of its shards
/// moved, since when they waited, and why it is not waited for any longer.
fn hold_expired_events(
    ended: &[handoff::HoldEnded],
    identities: &crate::identity::Identities,
) -> Vec<EventNote> {
    let mut by_pod: BTreeMap<&str, (u64, jiff::Timestamp)> = BTreeMap::new();
    for end in ended.iter().filter(|e| !e.returned) {
        let entry = by_pod.entry(end.pod.as_str()).or_insert((0, end.since));
        entry.0 += 1;
        entry.1 = entry.1.min(end.since);
    }
    by_pod
        .into_iter()
        .map(|(pod, (shards, since))| {
            EventNote::normal(
                reason::HOLD_EXPIRED,
                format!(
                    "{shards} shards held for pod {pod} since {since} are given to other pods: {}",
                    identities.why_not(pod)
                ),
            )
        })
        .collect()
}
