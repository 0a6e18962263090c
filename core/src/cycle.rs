//! One reconcile cycle, the only one in the project: observe → plan → apply,
//! with the order of the writes and the stop-on-first-failure rule kept here
//! once. The operator (Kubernetes API), the simulation (an in-memory API
//! server with injected faults) and the demo (an in-process cluster around
//! real emulators) each implement [`Observe`] and [`Apply`] and call
//! [`cycle`]; none of them orders writes itself, and none does anything for
//! a reconcile outside it.
//!
//! The order is the consumer contract's: the document first, then the pod
//! annotations (a pod's view must never run ahead of the document), then the
//! status, then the Events, and last what is served besides the API server
//! ([`Apply::serve`]: the operator's consumer endpoint and the CA its
//! consumers trust, and the operator's own memory of the document it
//! wrote), which must never run ahead of any of them. The first write that
//! fails ends the cycle: nothing after it is written or served, and the
//! next cycle observes again and rewrites what is still wrong. Events and
//! serving are best effort and never fail it.
//!
//! Time is an input: the caller passes `now` (the operator reads its clock
//! once its source read is done, see `reconcile_group`). Nothing here reads
//! a clock or needs a runtime; the in-memory implementations never wait, and
//! [`ready`] drives them without one.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use jiff::Timestamp;

use crate::crds::ShardGroupStatus;
use crate::document::AnnotationWrite;
use crate::events::EventNote;
use crate::observation::{Observation, PublishedVersion};
use crate::plan::{Decision, DocumentWrite, Leftovers, PlanMemory, plan_with};

/// What one observe step saw: the observation the plan step reads, and the
/// version of the published document it was read at (the precondition of
/// the document write).
#[derive(Debug, Clone)]
pub struct Observed {
    /// Everything the plan step sees.
    pub observation: Observation,
    /// The published document's version when it was read.
    pub published: PublishedVersion,
}

/// The reading half of a cycle. Read failures are not errors: they are part
/// of the observation (a failed topology read or lease scan is something the
/// plan step must see and act on), so observing never fails.
pub trait Observe {
    /// What the group looks like at `now`.
    fn observe(&mut self, now: Timestamp) -> impl Future<Output = Observed> + Send;

    /// The group's [`PlanMemory`], when the implementation keeps one between
    /// its cycles (the operator does, per group): the plan is quicker with
    /// it and decides the same. None by default.
    fn plan_memory(&mut self) -> Option<&mut PlanMemory> {
        None
    }
}

/// The writing half of a cycle: one method per kind of write, called by
/// [`cycle`] in the contract's order, each only when there is something to
/// write.
pub trait Apply {
    /// Why a write failed.
    type Error;
    /// What a document write reports back (the operator: the version at
    /// which the stored document is exactly the one sent).
    type Receipt;

    /// Called once the plan step decided, before the first write: the place
    /// to time the plan step or to look at the decision. Nothing by default.
    fn planned(&mut self, decision: &Decision) -> impl Future<Output = ()> + Send {
        let _ = decision;
        async {}
    }

    /// Publishes the document, conditioned on `base`: the version the
    /// cycle observed. The write must be refused when the published
    /// document changed since (a late write must never replace a newer
    /// document with an older one).
    fn document(
        &mut self,
        write: &DocumentWrite,
        base: &PublishedVersion,
    ) -> impl Future<Output = Result<Self::Receipt, Self::Error>> + Send;

    /// Writes (or removes, for a `None` view) these pod annotations; the
    /// implementation chooses how many go out at once, and returns the
    /// first failure. Their order does not matter: within one decision no
    /// pod's view depends on another's having been written.
    fn annotations(
        &mut self,
        writes: &[AnnotationWrite],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Writes the group's status.
    fn status(
        &mut self,
        status: &ShardGroupStatus,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Publishes Events, best effort (a failed Event is the implementation's
    /// to log, never a failed cycle).
    fn events(&mut self, events: &[EventNote]) -> impl Future<Output = ()> + Send;

    /// Called once every write of `decision` went out (never after a failed
    /// one): serves what they made true to readers other than the API
    /// server. `document` is the document write's receipt, when one was
    /// made. Best effort (a failure is the implementation's to log); nothing
    /// by default.
    fn serve(
        &mut self,
        decision: &Decision,
        document: Option<&Self::Receipt>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (decision, document);
        async {}
    }
}

/// A write step of the cycle, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// The published document.
    Document,
    /// The pod annotations.
    Annotations,
    /// The status.
    Status,
    /// The Events.
    Events,
    /// What is served besides the API server.
    Serve,
}

/// What a cycle wrote, in order, until it stopped (or finished).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied<R> {
    /// The steps that completed.
    pub steps: Vec<Step>,
    /// What the document write reported, when it was made.
    pub document: Option<R>,
}

impl<R> Default for Applied<R> {
    fn default() -> Self {
        Self {
            steps: Vec::new(),
            document: None,
        }
    }
}

/// The write that stopped a cycle.
#[derive(Debug)]
pub struct Stopped<E> {
    /// The step whose write failed (nothing after it was written).
    pub step: Step,
    /// Why.
    pub error: E,
}

/// One cycle's outcome. The decision is there whether or not every write
/// went out: the simulation checks it and schedules from it after a failed
/// write too, and the operator records it only when nothing failed.
#[derive(Debug)]
pub struct Cycle<R, E> {
    /// What the plan step decided.
    pub decision: Decision,
    /// What was written.
    pub applied: Applied<R>,
    /// The write that failed, if one did.
    pub stopped: Option<Stopped<E>>,
}

impl<R, E> Cycle<R, E> {
    /// The decision and what was written, or the error of the write that
    /// stopped the cycle.
    pub fn into_result(self) -> Result<(Decision, Applied<R>), E> {
        match self.stopped {
            None => Ok((self.decision, self.applied)),
            Some(stopped) => Err(stopped.error),
        }
    }
}

/// One reconcile: observes the group at `now`, plans, and applies the
/// decision in the contract's order (document → annotations → status →
/// Events), stopping at the first failed write.
pub async fn cycle<T>(target: &mut T, now: Timestamp) -> Cycle<T::Receipt, T::Error>
where
    T: Observe + Apply,
{
    let Observed {
        observation,
        published,
    } = target.observe(now).await;
    let (decision, leftovers) = match target.plan_memory() {
        Some(memory) => plan_with(&observation, memory),
        None => plan_with(&observation, &mut PlanMemory::default()),
    };
    target.planned(&decision).await;
    let mut applied = Applied::default();
    // What the plan is done with (the observation: every pod, the topology
    // and the lease table; the engine's input and output) is megabytes at
    // 20,000 shards: freed once the document is on its way, not before.
    let spent = (observation, leftovers);
    let stopped = apply(target, &decision, &published, &mut applied, spent).await;
    // The document is out: what the next plan builds from it is prepared
    // now, between events, rather than on the next event's path.
    if let (Some(write), Some(_)) = (&decision.document_write, &applied.document)
        && let Some(memory) = target.plan_memory()
    {
        memory.prepare(&write.document);
    }
    Cycle {
        decision,
        applied,
        stopped,
    }
}

/// The writes of `decision`, in order, until one fails.
async fn apply<T: Apply>(
    target: &mut T,
    decision: &Decision,
    published: &PublishedVersion,
    applied: &mut Applied<T::Receipt>,
    spent: (Observation, Leftovers),
) -> Option<Stopped<T::Error>> {
    if let Some(write) = &decision.document_write {
        match target.document(write, published).await {
            Ok(receipt) => applied.document = Some(receipt),
            Err(error) => {
                return Some(Stopped {
                    step: Step::Document,
                    error,
                });
            }
        }
        applied.steps.push(Step::Document);
    }
    drop(spent);
    if !decision.annotation_writes.is_empty() {
        if let Err(error) = target.annotations(&decision.annotation_writes).await {
            return Some(Stopped {
                step: Step::Annotations,
                error,
            });
        }
        applied.steps.push(Step::Annotations);
    }
    if let Some(status) = decision.status.write() {
        if let Err(error) = target.status(status).await {
            return Some(Stopped {
                step: Step::Status,
                error,
            });
        }
        applied.steps.push(Step::Status);
    }
    if !decision.events.is_empty() {
        target.events(&decision.events).await;
        applied.steps.push(Step::Events);
    }
    target.serve(decision, applied.document.as_ref()).await;
    applied.steps.push(Step::Serve);
    None
}

/// Drives a future that never waits (a cycle over in-memory
/// implementations) to its end, without a runtime.
///
/// # Panics
///
/// When the future waits: it needs a runtime, this is the wrong driver.
pub fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("cycle::ready drives only futures that never wait"),
    }
}

#[cfg(test)]
mod tests;
