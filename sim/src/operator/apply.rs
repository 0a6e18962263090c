//! The apply half of the simulated operator's cycle, and the simulated API
//! server's side of each write. Each write may fail (the cycle stops), or
//! time out for the client and land later (the cycle stops too: a client
//! that gave up reports an error): a document write at any later time, only
//! while its precondition holds, the others before the next reconcile. A
//! document write whose precondition no longer holds is refused (409).

use super::clock::{sim_ms, ts};
use super::group::{Group, Write};
use super::process::Operator;
use super::reconcile::Reconcile;
use super::watch::Object;
use crate::crds::{ShardGroupStatus, ShardPhase};
use crate::rng::Rng;
use crate::world::{Ms, World};
use shardring_core::AnnotationWrite;
use shardring_core::cycle::Apply;
use shardring_core::observation::PublishedVersion;
use shardring_core::plan::{Decision, DocumentWrite};

/// Longest delay of a late document write, ms (reconciles run every 0.5–3 s).
const LATE_DOC_MAX_MS: Ms = 60_000;

/// Why a simulated write did not go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteError {
    /// It failed.
    Failed,
    /// The client gave up; the server applies it later.
    Late,
    /// The document's precondition refused it (409).
    Refused,
}

impl Reconcile<'_> {
    /// One write through the faults: it fails, lands later, or is applied
    /// now. A write to a watched object (a pod's annotation, the document)
    /// is announced to the watch first, and its answer lands there: the
    /// events of the object that beat it are judged then.
    fn write(&mut self, write: Write) -> Result<(), WriteError> {
        let Some(object) = watched(self.g, &write) else {
            return self.send(write).map(|_| ());
        };
        let uid = match &write {
            Write::Annotation(_, uid, _) => uid.clone(),
            _ => String::new(),
        };
        let watch = &mut self.op.watch;
        watch.begin(&object);
        if matches!(object, Object::Pod(_)) {
            let world = &mut *self.world;
            if watch.meddle(&object, self.op.faults.foreign_write, || {
                world.next_version()
            }) {
                self.op.fired.foreign_writes += 1;
            }
        }
        let sent = self.send(write);
        let now = ts(self.world.now);
        // A relisting pod watch delivers nothing before the write's answer.
        let races = !matches!(object, Object::Pod(_)) || self.op.watch_gap_until.is_none();
        let watch = &mut self.op.watch;
        let raced = if races {
            watch.race_answer(&object)
        } else {
            Ok(())
        };
        let written = sent.as_ref().ok().copied().flatten();
        let landed = raced.and_then(|()| watch.land((&object, &uid), written, now));
        match landed {
            Ok(true) => self.woken_by(&object),
            Ok(false) => {}
            Err(violation) => self.world.violate(violation),
        }
        sent.map(|_| ())
    }

    /// An event held while a write to `object` was on its way was a
    /// change: it wakes the groups the object's watch wakes (this one after
    /// its reconcile).
    fn woken_by(&mut self, object: &Object) {
        let groups = match object {
            Object::Pod(_) => (0..self.op.groups.len()).collect(),
            Object::Document(g) => vec![*g],
        };
        let now = self.world.now;
        for h in groups {
            if h == self.g {
                self.op.groups[h].woken_during_reconcile = true;
            } else {
                let latency = self.op.watch.latency();
                self.op.wake(h, now, latency);
            }
        }
    }

    /// Sends one write through the faults: the version it left its
    /// watched object at, if it was applied to one.
    fn send(&mut self, write: Write) -> Result<Option<u64>, WriteError> {
        let op = &mut *self.op;
        let now = self.world.now;
        if self.rng.chance(op.faults.write_fail) {
            op.fired.writes_failed += 1;
            op.groups[self.g].fault(now);
            return Err(WriteError::Failed);
        }
        if self.rng.chance(op.faults.write_late) {
            // The client gives up; the server applies it later: a document
            // write at any time (its precondition decides), the others
            // shortly after.
            op.fired.writes_late += 1;
            let delay = match write {
                Write::Doc(..) => self.rng.range(1, LATE_DOC_MAX_MS),
                _ => self.rng.range(1, 400),
            };
            let group = &mut op.groups[self.g];
            group.late.push((now + delay, write));
            group.fault(now + delay);
            return Err(WriteError::Late);
        }
        let document = match &write {
            Write::Doc(doc, _) => Some(std::sync::Arc::new((**doc).clone())),
            _ => None,
        };
        let object = watched(self.g, &write);
        match op.commit(self.g, self.world, write) {
            Ok(version) => {
                // The operator's memory keeps what it wrote, at its version.
                if let Some(document) = document {
                    op.groups[self.g].wrote_document(document);
                }
                if let (Some(object), Some(version)) = (object, version) {
                    op.watch.applied(&object, version);
                }
                Ok(version)
            }
            Err(refused) => {
                // 409: nothing after the document goes out.
                op.groups[self.g].fault(now);
                Err(refused)
            }
        }
    }
}

/// The watched object `write` of group `g` changes, if any.
fn watched(g: usize, write: &Write) -> Option<Object> {
    match write {
        Write::Doc(..) => Some(Object::Document(g)),
        Write::Annotation(pod, ..) => Some(Object::Pod(pod.clone())),
        Write::Status(_) => None,
    }
}

impl Apply for Reconcile<'_> {
    type Error = WriteError;
    type Receipt = ();

    /// Checks the decision (a read error never shrinks the document),
    /// records its handoffs, and lets a late document write land between
    /// this reconcile's read and its own write.
    async fn planned(&mut self, decision: &Decision) {
        if let Some(DocumentWrite { document: doc, .. }) = &decision.document_write {
            let lost: Vec<&String> = self
                .before
                .iter()
                .filter(|s| !doc.shards.contains_key(*s))
                .collect();
            if !lost.is_empty() && self.read_error {
                self.world.violate(format!(
                    "a read error shrank the document: {lost:?} dropped"
                ));
            }
        }
        for h in &decision.handoffs {
            self.op.groups[self.g].handoffs.push((
                h.evidence.label(),
                u64::try_from(h.duration.as_millis()).unwrap_or(u64::MAX),
            ));
        }
        self.op.land_racing(self.g, self.world, self.rng);
    }

    async fn document(
        &mut self,
        write: &DocumentWrite,
        base: &PublishedVersion,
    ) -> Result<(), WriteError> {
        self.write(Write::Doc(
            Box::new((*write.document).clone()),
            base.clone(),
        ))
    }

    async fn annotations(&mut self, writes: &[AnnotationWrite]) -> Result<(), WriteError> {
        for w in writes {
            self.write(Write::Annotation(
                w.pod.clone(),
                w.uid.clone().unwrap_or_default(),
                w.view.clone(),
            ))?;
        }
        Ok(())
    }

    async fn status(&mut self, status: &ShardGroupStatus) -> Result<(), WriteError> {
        self.write(Write::Status(Box::new(status.clone())))
    }

    /// The simulated API server keeps no Events.
    async fn events(&mut self, _: &[shardring_core::EventNote]) {}
}

impl Group {
    /// The precondition of a document write planned now: the ConfigMap's
    /// version, `Absent` when there is none.
    pub(super) fn doc_base(&self) -> PublishedVersion {
        match &self.doc {
            Some(_) => PublishedVersion::At(self.doc_version.to_string()),
            None => PublishedVersion::Absent,
        }
    }
}

impl Operator {
    /// Lands late writes that are due: their watch events are changes the
    /// operator does not know (no answer told it their versions).
    pub fn land(&mut self, world: &mut World) {
        let now = world.now;
        for g in 0..self.groups.len() {
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.groups[g].late)
                .into_iter()
                .partition(|(at, _)| *at <= now);
            self.groups[g].late = later;
            for (_, write) in due {
                self.commit_unanswered(g, world, write);
            }
        }
    }

    /// Applies a write whose client gave up: its watch event, if it was
    /// applied to a watched object; whether it was applied.
    fn commit_unanswered(&mut self, g: usize, world: &mut World, write: Write) -> bool {
        let object = watched(g, &write);
        match self.commit(g, world, write) {
            Ok(version) => {
                if let (Some(object), Some(version)) = (object, version) {
                    self.watch.applied_unanswered(object, version);
                }
                true
            }
            Err(_) => false,
        }
    }

    /// A late document write of group `g` may land while its reconcile
    /// runs, after its read and before its own write (which its
    /// precondition then refuses). The ConfigMap watch delivers it after
    /// that reconcile ([`Group::landed_during_reconcile`]).
    fn land_racing(&mut self, g: usize, world: &mut World, rng: &mut Rng) {
        let Some(i) = self.groups[g]
            .late
            .iter()
            .position(|(_, w)| matches!(w, Write::Doc(..)))
        else {
            return;
        };
        if rng.chance(0.5) {
            let (_, write) = self.groups[g].late.remove(i);
            let landed = self.commit_unanswered(g, world, write);
            self.groups[g].landed_during_reconcile |= landed;
        }
    }

    /// Applies one write of group `g` as the API server would: the
    /// resourceVersion it left a watched object at (`None`: a status, or an
    /// annotation of a pod that is gone); refused when the document's
    /// precondition does not hold.
    fn commit(
        &mut self,
        g: usize,
        world: &mut World,
        write: Write,
    ) -> Result<Option<u64>, WriteError> {
        let group = &mut self.groups[g];
        match write {
            Write::Doc(doc, base) => {
                if base != group.doc_base() {
                    self.fired.writes_refused += 1;
                    return Err(WriteError::Refused);
                }
                if let Some(current) = &group.doc
                    && doc.epoch <= current.epoch
                {
                    world.violate(format!(
                        "the published epoch went from {} to {}",
                        current.epoch, doc.epoch
                    ));
                }
                for (id, r) in &doc.shards {
                    let was_revoking = group
                        .doc
                        .as_ref()
                        .and_then(|d| d.shards.get(id))
                        .is_some_and(|before| before.state == ShardPhase::Revoking);
                    // A revoke that holds the shard for its own owner (away,
                    // waited for) is not a move.
                    let held_for_owner = r.return_hold.is_some()
                        && r.handoff.as_ref().and_then(|h| h.to.as_ref()) == r.owner.as_ref();
                    if r.state == ShardPhase::Revoking && !was_revoking && !held_for_owner {
                        // Timed by the plan that decided it (`handoff.since`),
                        // not by when its document landed: a late write
                        // lands long after the decision the damping counts.
                        let decided = r.handoff.as_ref().map_or(world.now, |h| sim_ms(h.since));
                        group.revokes.push((decided, id.clone()));
                    }
                    if r.state != ShardPhase::Active {
                        continue;
                    }
                    if let Some(owner) = &r.owner {
                        let prev = group.last_owner.insert(id.clone(), owner.clone());
                        if prev.is_some_and(|p| &p != owner) {
                            group.moves += 1;
                        }
                    }
                }
                group.doc = Some(*doc);
                group.doc_version += 1;
                group.writes.documents += 1;
                Ok(Some(group.doc_version))
            }
            Write::Annotation(pod, uid, view) => {
                group.writes.annotations += 1;
                let Some(p) = world
                    .pods
                    .iter_mut()
                    .find(|p| p.object && p.name == pod && p.uid == uid)
                else {
                    return Ok(None);
                };
                match view {
                    Some(v) => p.annotations.insert(g, v.to_annotation()),
                    None => p.annotations.remove(&g),
                };
                Ok(Some(world.next_version()))
            }
            Write::Status(status) => {
                let before = group.status.as_ref().and_then(|s| s.last_pod_change);
                if let Some(change) = status.last_pod_change
                    && before != Some(change)
                {
                    group.pod_changes.push(sim_ms(change));
                }
                group.writes.statuses += 1;
                if !same_but_move_log(group.status.as_ref(), &status) {
                    group.writes.statuses_beyond_move_log += 1;
                }
                group.status = Some(*status);
                Ok(None)
            }
        }
    }
}

/// Whether `status` differs from `before` at most in the move budget's log
/// (a move leaves it as its window passes, at the next reconcile; a move
/// itself is a document write).
fn same_but_move_log(before: Option<&ShardGroupStatus>, status: &ShardGroupStatus) -> bool {
    let Some(before) = before else {
        return false;
    };
    let mut before = before.clone();
    before.move_log.clone_from(&status.move_log);
    before == *status
}
