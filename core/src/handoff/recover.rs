//! Recovery of a lost document: when the published document is missing or
//! unreadable, the assignment the pods act on is rebuilt from the last
//! document the operator held of a deleted ConfigMap (at the group's latest
//! epoch), else from the pods' annotations, so no shard goes to a second pod
//! while its owner reads it. When neither tells (a group that publishes none, or pods that lost
//! them) but the group has published before, every shard is revoked from
//! whoever may still read it: its lease owner, or [`UNKNOWN_READER`].

use std::collections::BTreeMap;

use crate::crds::{AssignmentDocument, Handoff, PodView, ShardPhase, ShardRecord};
use crate::observation::{LeaseObservation, Observation, Published};
use crate::topology::Topology;

/// The owner a recovered revoke names when nothing says which pod read a
/// shard. No pod can be called this (a pod name starts with a letter or a
/// digit), so no pod's word completes the revoke: only the drain timeout
/// since the recovery does, as for a pod that is gone.
pub const UNKNOWN_READER: &str = "(unknown reader: the document was lost)";

/// The last document the operator held of a deleted ConfigMap, when it can
/// stand for what consumers may still act on: the group has published
/// before (its status has an epoch: a group deleted and created again under
/// the same name starts at none) and the document is not behind that epoch
/// (one behind means another replica published since, unseen here).
pub(crate) fn trusted_memory(obs: &Observation) -> Option<&AssignmentDocument> {
    let status_epoch = obs.group.status.as_ref().map_or(0, |s| s.epoch);
    match &obs.published {
        Published::Deleted(last) if status_epoch > 0 && last.epoch >= status_epoch => {
            Some(last.as_ref())
        }
        _ => None,
    }
}

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
        // The epoch of the view that listed the revoke: the owner
        // acknowledges its release at that epoch or later.
        .map(|(id, (owner, epoch))| (id, revoked_at(owner, now, epoch, None)))
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

/// When the published document is missing or unreadable, no annotation
/// rebuilt it ([`recover_previous`] gave nothing) and the group has
/// published before (`kept_epoch`, from its status): every shard of
/// `topology` is revoked at once from whoever may still read it (a consumer
/// keeps the copy of the document it last saw; a mounted ConfigMap keeps its
/// last content), so none is active anywhere before that reader let go. With
/// a lease table read, that is the lease's owner (a shard nobody leases is
/// read by nobody); without one, [`UNKNOWN_READER`], whose revokes end by
/// the drain timeout. `None` when there is nothing to recover from.
pub(crate) fn revoke_unknown_readers(
    obs: &Observation,
    topology: &Topology,
    kept_epoch: u64,
) -> Option<AssignmentDocument> {
    if kept_epoch == 0 || obs.published.document().is_some() {
        return None;
    }
    let leases = match &obs.leases {
        LeaseObservation::Read(table) => Some(table),
        LeaseObservation::Failed(_) | LeaseObservation::NotConfigured => None,
    };
    let now = obs.now;
    let shards: BTreeMap<String, ShardRecord> = topology
        .shards
        .iter()
        .filter_map(|shard| {
            let (owner, lease_counter) = match leases {
                Some(table) => {
                    let lease = table.get(&shard.id)?;
                    (lease.owner.clone()?, Some(lease.counter))
                }
                None => (UNKNOWN_READER.to_owned(), None),
            };
            let record = revoked_at(owner, now, kept_epoch, lease_counter);
            Some((shard.id.clone(), record))
        })
        .collect();
    Some(AssignmentDocument::from_shards(
        obs.group.qualified_name(),
        0,
        shards,
        std::iter::empty(),
    ))
}

/// A recovered record: revoked from `owner` at `since`, published at
/// `epoch`, with no destination yet.
fn revoked_at(
    owner: String,
    since: jiff::Timestamp,
    epoch: u64,
    lease_counter: Option<u64>,
) -> ShardRecord {
    ShardRecord {
        owner: Some(owner),
        state: ShardPhase::Revoking,
        handoff: Some(Box::new(Handoff {
            to: None,
            since,
            epoch,
            lease_counter,
        })),
        ..Default::default()
    }
}
