//! The operator's watches of its pods and of its groups' ConfigMaps as the
//! simulated API server delivers them ([`Watch`]), each event judged by the
//! operator's own echo bookkeeping ([`Echoes`], the core's, which the
//! operator runs behind its watches): the echo of a write the operator
//! had answered wakes nothing, any other change wakes the object's groups.
//!
//! Every change to a watched object is an event at a version of its own:
//! the world's changes to a pod (found where the pod watch looks), the
//! operator's annotation and document writes (answered, or applied by the
//! server after the client gave up), and another writer's change to a pod
//! while an annotation write to it is on its way (a fault). Events are
//! delivered in order, at the next watch point, or earlier: the watch can
//! beat a write's answer, so while a write is on its way the events of its
//! object may arrive before the answer (the echo among them), and are
//! held until it lands.
//!
//! The simulation knows what each event was, and checks every verdict:
//! an echo of an answered write that wakes a group, or anything else that
//! does not (a change lost: its groups would wait for their next requeue),
//! is a violation. What is random here draws from the watch's own stream,
//! so the run's main stream is drawn as it would be without it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use jiff::Timestamp;
use shardring_core::echoes::{Answer, Echoes, PENDING_PER_OBJECT, Verdict};

use crate::rng::Rng;
use crate::world::Ms;

/// A watched object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Object {
    /// The pod of this name (one namespace).
    Pod(String),
    /// The document ConfigMap of the group of this index.
    Document(usize),
}

/// Who made a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The world, or another writer.
    Other,
    /// The operator, whose write was answered (`true`), or applied after
    /// the client gave up (`false`: its version was never known).
    Own { answered: bool },
}

/// A change to a watched object, on its way to the operator.
#[derive(Debug, Clone)]
struct Event {
    object: Object,
    version: String,
    origin: Origin,
    /// For an answered own write: how many answered writes to its object
    /// came before it (the bookkeeping keeps the last
    /// [`PENDING_PER_OBJECT`]).
    answered_before: u64,
    /// The object of this uid was deleted (the bookkeeping forgets the
    /// writes to it).
    deleted: Option<String>,
}

/// How the events delivered so far were judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdicts {
    /// Echoes of own writes: woke nothing.
    pub echoes: u64,
    /// Held while a write to their object was on its way.
    pub held: u64,
    /// Changes: woke the object's groups.
    pub changes: u64,
}

impl Verdicts {
    /// Adds `other`'s.
    pub fn add(&mut self, other: Verdicts) {
        self.echoes += other.echoes;
        self.held += other.held;
        self.changes += other.changes;
    }
}

/// What a delivery of events woke.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Woken {
    /// Some pod changed: every group looks again.
    pub pods: bool,
    /// The groups whose document ConfigMap changed.
    pub documents: BTreeSet<usize>,
}

impl Woken {
    fn add(&mut self, object: &Object) {
        match object {
            Object::Pod(_) => self.pods = true,
            Object::Document(g) => {
                self.documents.insert(*g);
            }
        }
    }
}

/// The operator's watch connections and its echo bookkeeping (lost when
/// it crashes: a new process watches afresh), with the events on their
/// way and what the simulation knows of each.
#[derive(Debug, Clone)]
pub struct Watch {
    queue: VecDeque<Event>,
    echoes: Echoes<Object, Timestamp>,
    /// Answered own writes per object so far.
    answered: BTreeMap<Object, u64>,
    /// Per object whose write is on its way: the events held for it.
    held: BTreeMap<Object, Vec<Origin>>,
    /// How the events were judged.
    pub verdicts: Verdicts,
    /// The watch's own random stream (which events beat a write's answer,
    /// another writer's changes).
    rng: Rng,
}

/// How likely an event of an object arrives before the answer of a write
/// to it that is on its way.
const BEATS_ANSWER: f64 = 0.3;

impl Watch {
    /// A watch starting afresh, its randomness drawn from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            queue: VecDeque::new(),
            echoes: Echoes::default(),
            answered: BTreeMap::new(),
            held: BTreeMap::new(),
            verdicts: Verdicts::default(),
            rng: Rng::new(seed),
        }
    }

    /// The same watch after a crash: a new process's, with nothing on its
    /// way and nothing remembered.
    pub fn restarted(&mut self) {
        let seed = self.rng.next_u64();
        *self = Self {
            verdicts: self.verdicts,
            ..Self::new(seed)
        };
    }

    /// Someone other than the operator changed `object` at `version`.
    pub fn changed(&mut self, object: Object, version: u64) {
        self.push(object, version, Origin::Other, None);
    }

    /// `object`, of `uid`, was deleted (its last event, at `version`).
    pub fn deleted(&mut self, object: Object, uid: &str, version: u64) {
        self.push(object, version, Origin::Other, Some(uid.to_owned()));
    }

    /// A write of the operator's to `object` the server applied at
    /// `version` after its client gave up (no answer came).
    pub fn applied_unanswered(&mut self, object: Object, version: u64) {
        self.push(object, version, Origin::Own { answered: false }, None);
    }

    /// The server applied the write to `object` on its way at `version`;
    /// the answer is still to come.
    pub fn applied(&mut self, object: &Object, version: u64) {
        self.push(
            object.clone(),
            version,
            Origin::Own { answered: true },
            None,
        );
    }

    fn push(&mut self, object: Object, version: u64, origin: Origin, deleted: Option<String>) {
        let answered_before = self.answered.get(&object).copied().unwrap_or(0);
        self.queue.push_back(Event {
            object,
            version: version.to_string(),
            origin,
            answered_before,
            deleted,
        });
    }

    /// The operator is down: what was on its way is lost (the next
    /// process lists every object, and reconciles every group).
    pub fn lost(&mut self) {
        self.queue.clear();
    }

    /// A latency for a wake-up decided in the middle of a reconcile (ms).
    pub fn latency(&mut self) -> Ms {
        self.rng.range(10, 300)
    }

    /// Delivers the events on their way (the pods' only when `pods`: the
    /// pod watch may be relisting), in order; what they woke, or the first
    /// verdict that was wrong.
    pub fn deliver(&mut self, pods: bool) -> Result<Woken, String> {
        let mut woken = Woken::default();
        let (now, later): (VecDeque<Event>, VecDeque<Event>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|e| pods || !matches!(e.object, Object::Pod(_)));
        self.queue = later;
        for event in now {
            if self.judge(&event)? == Verdict::Change {
                woken.add(&event.object);
            }
        }
        Ok(woken)
    }

    /// Judges one event and checks the verdict against what it was.
    fn judge(&mut self, event: &Event) -> Result<Verdict, String> {
        let verdict = match &event.deleted {
            // As the operator's watch does: a deletion forgets the deleted
            // object's writes and always wakes (no echo, never held).
            Some(uid) => {
                self.echoes.forget(&event.object, uid);
                Verdict::Change
            }
            None => self.echoes.judge(&event.object, &event.version),
        };
        let own_answered = event.origin == (Origin::Own { answered: true });
        // The bookkeeping keeps the last PENDING_PER_OBJECT writes of an
        // object: the echo of one older than those wakes, as a relist
        // would.
        let remembered = self.answered.get(&event.object).copied().unwrap_or(0)
            - event.answered_before
            <= PENDING_PER_OBJECT as u64;
        match verdict {
            Verdict::Echo => {
                self.verdicts.echoes += 1;
                if !own_answered {
                    return Err(format!(
                        "{:?} at {} ({:?}) was taken for the echo of an own write: the change woke nobody",
                        event.object, event.version, event.origin
                    ));
                }
            }
            Verdict::Held => {
                self.verdicts.held += 1;
                let Some(held) = self.held.get_mut(&event.object) else {
                    return Err(format!(
                        "{:?} at {} was held with no write to it on its way",
                        event.object, event.version
                    ));
                };
                held.push(event.origin);
            }
            Verdict::Change => {
                self.verdicts.changes += 1;
                if own_answered && remembered {
                    return Err(format!(
                        "the echo of the operator's answered write to {:?} at {} woke its groups",
                        event.object, event.version
                    ));
                }
            }
        }
        Ok(verdict)
    }

    /// A write to `object` is about to be sent.
    pub fn begin(&mut self, object: &Object) {
        self.echoes.begin(object.clone());
        self.held.entry(object.clone()).or_default();
    }

    /// While a write to `object` is on its way, another writer changes it
    /// (with likelihood `chance`) at the version `next_version` gives;
    /// whether it did.
    pub fn meddle(
        &mut self,
        object: &Object,
        chance: f64,
        next_version: impl FnOnce() -> u64,
    ) -> bool {
        let meddled = chance > 0.0 && self.rng.chance(chance);
        if meddled {
            self.changed(object.clone(), next_version());
        }
        meddled
    }

    /// The events of `object` on their way may beat the answer of the
    /// write to it: each that does arrives now (and is held, or is the
    /// echo of an earlier answered write), in order; the rest wait.
    pub fn race_answer(&mut self, object: &Object) -> Result<(), String> {
        let mut waiting = VecDeque::new();
        let mut blocked = false;
        for event in std::mem::take(&mut self.queue) {
            // An object's events arrive in order: once one waits, the
            // rest of that object's wait too.
            if event.object == *object && !blocked && self.rng.chance(BEATS_ANSWER) {
                self.judge(&event)?;
            } else {
                blocked |= event.object == *object;
                waiting.push_back(event);
            }
        }
        self.queue = waiting;
        Ok(())
    }

    /// The write to `object` (of `uid`) on its way is answered at `now`
    /// with `version` (`None`: it failed, or its client gave up). Whether
    /// the events held for it woke the object's groups, or the verdict if
    /// it was wrong.
    pub fn land(
        &mut self,
        (object, uid): (&Object, &str),
        version: Option<u64>,
        now: Timestamp,
    ) -> Result<bool, String> {
        let written = version.map(|v| Answer {
            version: v.to_string(),
            uid: uid.to_owned(),
            at: now,
        });
        if written.is_some() {
            *self.answered.entry(object.clone()).or_default() += 1;
        }
        let changed = self.echoes.land(object, written);
        let held = self.held.remove(object).unwrap_or_default();
        // Only the echo of this write, answered now, may be held and not
        // wake: anything else held was a change.
        let expected = held
            .iter()
            .any(|origin| *origin != Origin::Own { answered: true });
        if changed != expected {
            return Err(format!(
                "a write to {object:?} landed holding {held:?}, and the bookkeeping said changed = {changed}"
            ));
        }
        Ok(changed)
    }
}
