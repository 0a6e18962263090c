//! When the published document is copied for the next document to patch:
//! the next document of a plan that moves shards is the published one with
//! a few records changed, and its copy (a fifth of a join's plan at 20,000
//! shards) depends on nothing the engine decides. So a large document is
//! copied once it is published, before the next event
//! ([`PlanMemory::prepare`](crate::PlanMemory::prepare)); a plan about to
//! move shards of one that has no copy yet (the first after a restart, say)
//! makes it on a thread of its own beside the engine instead of after it.
//! Either way the copy is off the path from a pod event to the published
//! document.

use crate::crds::AssignmentDocument;
use crate::observation::Observation;
use crate::pacing::Pacing;

/// A document with fewer shards than this is copied after the engine, when
/// the plan needs it: below it the copy costs less than starting a thread,
/// or than keeping a prepared copy resident between plans.
pub(super) const COPY_AHEAD_SHARDS: usize = 2_000;

/// Whether the plan memory prepares `published` for the next plan
/// ([`PlanMemory::prepare`](crate::PlanMemory::prepare)): it is large
/// enough for its copy to be worth keeping.
pub(super) fn worth_preparing(published: &AssignmentDocument) -> bool {
    published.shards.len() >= COPY_AHEAD_SHARDS
}

/// Whether to copy `published` beside the engine: it is large, and the
/// eligible pods differ from those the group's status last recorded (a pod
/// joined or left), so the plan is about to move shards. A plan whose pods
/// did not change usually moves nothing, and a copy it does not use would
/// be megabytes to free.
pub(super) fn copies_ahead(
    obs: &Observation,
    pacing: &Pacing,
    published: &AssignmentDocument,
) -> bool {
    worth_preparing(published)
        && obs
            .group
            .status
            .as_ref()
            .and_then(|status| status.pod_set_digest.as_deref())
            != Some(pacing.pod_set_digest.as_str())
}
