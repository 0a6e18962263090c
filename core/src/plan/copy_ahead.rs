//! When the plan copies the published document while the engine runs: the
//! next document of a plan that moves shards is the published one with a
//! few records changed, and its copy (a fifth of a join's plan at 20,000
//! shards) depends on nothing the engine decides, so it can be made on a
//! thread of its own beside the engine instead of after it, off the path
//! from a pod event to the published document.

use crate::crds::AssignmentDocument;
use crate::observation::Observation;
use crate::pacing::Pacing;

/// A document with fewer shards than this is copied after the engine, when
/// the plan needs it: below it the copy costs less than starting a thread.
const COPY_AHEAD_SHARDS: usize = 2_000;

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
    published.shards.len() >= COPY_AHEAD_SHARDS
        && obs
            .group
            .status
            .as_ref()
            .and_then(|status| status.pod_set_digest.as_deref())
            != Some(pacing.pod_set_digest.as_str())
}
