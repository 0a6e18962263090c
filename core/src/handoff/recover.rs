//! Recovery of a lost document: when the published document is missing or
//! unreadable, the assignment the pods act on is rebuilt from their
//! annotations, so no shard goes to a second pod while its owner reads it.

use std::collections::BTreeMap;

use crate::crds::{AssignmentDocument, Handoff, PodView, ShardPhase, ShardRecord};
use crate::observation::Observation;

/// When the published document is missing or unreadable, the assignment the
/// pods are acting on is rebuilt from their annotations, so a deleted or
/// corrupt ConfigMap never hands a shard to a second pod while its owner
/// still reads it. A shard listed `active` by several pods goes to the view
/// with the highest epoch; one only in `revoking` lists stays revoking (its
/// drain starts over). `None` when the document was read, or no pod carries
/// a view.
pub(crate) fn recover_previous(obs: &Observation) -> Option<AssignmentDocument> {
    if obs.published.document().is_some() {
        return None;
    }
    let mut active: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut revoking: BTreeMap<String, (String, u64)> = BTreeMap::new();
    for pod in &obs.pods {
        let Some(view) = pod
            .annotation
            .as_deref()
            .and_then(|a| PodView::from_annotation(a).ok())
        else {
            continue;
        };
        for shard in view.active {
            let newer = active.get(&shard).is_none_or(|(e, _)| view.epoch > *e);
            if newer {
                active.insert(shard, (view.epoch, pod.name.clone()));
            }
        }
        for shard in view.revoking {
            revoking
                .entry(shard)
                .or_insert_with(|| (pod.name.clone(), view.epoch));
        }
    }
    if active.is_empty() && revoking.is_empty() {
        return None;
    }
    let now = obs.now;
    let mut shards: BTreeMap<String, ShardRecord> = revoking
        .into_iter()
        .map(|(id, (owner, epoch))| {
            let record = ShardRecord {
                owner: Some(owner),
                state: ShardPhase::Revoking,
                // The epoch of the view that listed the revoke: the owner
                // acknowledges its release at that epoch or later.
                handoff: Some(Box::new(Handoff {
                    to: None,
                    since: now,
                    epoch,
                    lease_counter: None,
                })),
                ..Default::default()
            };
            (id, record)
        })
        .collect();
    for (id, (_, owner)) in active {
        shards.insert(
            id,
            ShardRecord {
                owner: Some(owner),
                state: ShardPhase::Active,
                ..Default::default()
            },
        );
    }
    Some(AssignmentDocument::from_shards(
        obs.group.qualified_name(),
        0,
        shards,
        std::iter::empty(),
    ))
}
