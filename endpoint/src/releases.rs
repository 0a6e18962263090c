//! Acknowledged releases: a consumer says it stopped reading a shard its view
//! listed as revoking. The store validates each acknowledgement against the
//! revokes of the published document (synced by the controller after each
//! cycle), keeps it as handoff evidence for the core's plan step
//! (`Observation::releases`), and asks for a reconcile of the group so the
//! new owner is activated at once.
//!
//! Idempotent: the same acknowledgement again is a duplicate, also after
//! the handoff it completed (until the shard is revoked again). Nothing is
//! persisted: after a leader change the consumer sends again every release
//! its view still lists as revoking, and without one the drain timeout still
//! completes the move (see `docs/handoff.md`).

use parking_lot::Mutex;
use std::collections::HashMap;

use jiff::Timestamp;
use shardring_core::observation::{ReleaseAck, ReleaseAcks};
use shardring_crds::assignment::{AssignmentDocument, ShardPhase};
use shardring_crds::endpoint::{ReleaseOutcome, ReleaseRequest};

use super::requests::ReconcileRequests;
use shardring_core::GroupKey;

/// Why an acknowledgement was refused (HTTP 409, or 404 for an unknown
/// group). Nothing is recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseRejection {
    /// The leader has not reconciled this group (yet).
    #[error("ShardGroup {0} is not served by this operator (yet); retry shortly")]
    UnknownGroup(String),
    /// The shard is not revoking from the caller in the published document.
    #[error(
        "pod {pod} holds no revoke of shard {shard}: release only shards your newest view \
         lists as revoking"
    )]
    NotRevoking {
        /// The caller.
        pod: String,
        /// The shard.
        shard: String,
    },
    /// The acknowledgement names an epoch before the revoke began: it is
    /// about an earlier revoke of the shard.
    #[error(
        "the release of {shard} names epoch {epoch}, older than its revoke (epoch {revoke_epoch}): \
         send the epoch of the view that lists it as revoking"
    )]
    StaleEpoch {
        /// The shard.
        shard: String,
        /// The epoch sent.
        epoch: u64,
        /// The epoch at which the revoke was published.
        revoke_epoch: u64,
    },
    /// The acknowledgement names an epoch no document has had yet.
    #[error(
        "the release of {shard} names epoch {epoch}, newer than the published document \
         (epoch {published}): send the epoch of the view that lists it as revoking"
    )]
    FutureEpoch {
        /// The shard.
        shard: String,
        /// The epoch sent.
        epoch: u64,
        /// The published document's epoch.
        published: u64,
    },
    /// The same shard was already released by this pod with another
    /// checkpoint: a release is final, and its checkpoint cannot change.
    #[error(
        "shard {shard} was already released with another checkpoint; a release cannot be changed"
    )]
    Conflict {
        /// The shard.
        shard: String,
    },
}

impl ReleaseRejection {
    /// Constant reason for the error body.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnknownGroup(_) => "UnknownShardGroup",
            Self::NotRevoking { .. } => "NotRevoking",
            Self::StaleEpoch { .. } => "StaleEpoch",
            Self::FutureEpoch { .. } => "FutureEpoch",
            Self::Conflict { .. } => "ReleaseConflict",
        }
    }
}

/// A revoke in the published document: who must let go, since which epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Revoke {
    owner: String,
    epoch: u64,
}

#[derive(Debug, Default)]
struct GroupReleases {
    /// The published document's epoch.
    epoch: u64,
    /// Revoking shards of the published document.
    revokes: HashMap<String, Revoke>,
    /// Acknowledged releases, by shard: kept until the shard is revoked
    /// again, so a repeated acknowledgement is a duplicate.
    acks: HashMap<String, ReleaseAck>,
    /// How many releases were accepted so far (never reset while the
    /// group is known): a cycle that sees it grow knows a reconcile of
    /// the group is already requested.
    accepted: u64,
}

/// The acknowledged releases of every group the leader reconciles.
#[derive(Debug)]
pub struct Releases {
    groups: Mutex<HashMap<GroupKey, GroupReleases>>,
    /// Asks the controller to reconcile a group now.
    reconcile: ReconcileRequests,
}

impl Releases {
    /// Releases that ask for reconciles on `reconcile`.
    pub fn new(reconcile: ReconcileRequests) -> Self {
        Self {
            groups: Mutex::default(),
            reconcile,
        }
    }

    /// Records `release` from pod `pod` (uid `uid`) at `now`, after checking
    /// that the published document revokes the shard from that pod at an
    /// epoch no later than the one sent.
    pub fn submit(
        &self,
        group: &GroupKey,
        pod: &str,
        uid: &str,
        release: &ReleaseRequest,
        now: Timestamp,
    ) -> Result<ReleaseOutcome, ReleaseRejection> {
        let mut groups = self.groups.lock();
        let state = groups
            .get_mut(group)
            .ok_or_else(|| ReleaseRejection::UnknownGroup(group.to_string()))?;
        let shard = &release.shard;
        if let Some(ack) = state.acks.get(shard)
            && ack.pod == pod
            && ack.uid == uid
        {
            if ack.checkpoint != release.checkpoint {
                return Err(ReleaseRejection::Conflict {
                    shard: shard.clone(),
                });
            }
            return Ok(ReleaseOutcome::Duplicate);
        }
        // A document newer than the one synced here (a consumer that
        // watches the ConfigMap can see it, and release, before the cycle
        // that wrote it syncs this store): the client retries, where a
        // NotRevoking would make it drop the release.
        if release.epoch > state.epoch {
            return Err(ReleaseRejection::FutureEpoch {
                shard: shard.clone(),
                epoch: release.epoch,
                published: state.epoch,
            });
        }
        let revoke = state
            .revokes
            .get(shard)
            .filter(|r| r.owner == pod)
            .ok_or_else(|| ReleaseRejection::NotRevoking {
                pod: pod.to_owned(),
                shard: shard.clone(),
            })?;
        if release.epoch < revoke.epoch {
            return Err(ReleaseRejection::StaleEpoch {
                shard: shard.clone(),
                epoch: release.epoch,
                revoke_epoch: revoke.epoch,
            });
        }
        state.acks.insert(
            shard.clone(),
            ReleaseAck {
                pod: pod.to_owned(),
                uid: uid.to_owned(),
                epoch: release.epoch,
                checkpoint: release.checkpoint.clone(),
                at: now,
            },
        );
        state.accepted += 1;
        drop(groups);
        // The controller may be gone (shutting down): the release is
        // recorded all the same, and the next leader's consumers resend.
        self.reconcile.request(group);
        Ok(ReleaseOutcome::Accepted)
    }

    /// Takes the revokes of the document the cycle left published. An
    /// acknowledgement whose shard is no longer revoking from its pod stays
    /// (so a repeat is a duplicate) until the shard is revoked again.
    pub fn sync_group(&self, group: &GroupKey, document: Option<&AssignmentDocument>) {
        let mut groups = self.groups.lock();
        let state = groups.entry(group.clone()).or_default();
        let Some(doc) = document else {
            state.epoch = 0;
            state.revokes.clear();
            return;
        };
        state.epoch = doc.epoch;
        state.revokes = doc
            .shards
            .iter()
            .filter(|(_, r)| r.state == ShardPhase::Revoking)
            .filter_map(|(id, r)| {
                let owner = r.owner.clone()?;
                let epoch = r.handoff.as_ref().map_or(0, |h| h.epoch);
                Some((id.clone(), Revoke { owner, epoch }))
            })
            .collect();
        let revokes = &state.revokes;
        // An ack of an earlier revoke (the shard came back and is revoked
        // again, at a later epoch) is no longer about this one.
        state.acks.retain(|shard, ack| {
            revokes
                .get(shard)
                .is_none_or(|r| r.owner == ack.pod && ack.epoch >= r.epoch)
        });
    }

    /// The acknowledgements the plan step may use for `group`.
    pub fn observe(&self, group: &GroupKey) -> ReleaseAcks {
        let groups = self.groups.lock();
        groups
            .get(group)
            .map(|state| ReleaseAcks {
                acks: state
                    .acks
                    .iter()
                    .filter(|(shard, _)| state.revokes.contains_key(*shard))
                    .map(|(shard, ack)| (shard.clone(), ack.clone()))
                    .collect(),
            })
            .unwrap_or_default()
    }

    /// How many releases of `group` were accepted so far: each asked for a
    /// reconcile of the group, so a count that grew since a cycle observed
    /// it says the next reconcile is already on its way.
    pub fn accepted(&self, group: &GroupKey) -> u64 {
        self.groups
            .lock()
            .get(group)
            .map_or(0, |state| state.accepted)
    }

    /// Forgets a deleted group.
    pub fn remove_group(&self, group: &GroupKey) {
        self.groups.lock().remove(group);
    }

    /// Forgets everything: this replica lost the leadership.
    pub fn clear(&self) {
        self.groups.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use futures::{FutureExt, StreamExt};
    use shardring_crds::assignment::{Handoff, ShardRecord};

    use super::*;
    use crate::requests::Requested;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// A document at `epoch` where `s-0` is revoking from `a` since epoch
    /// `revoke_epoch` and `s-1` is active on `b`.
    fn doc(epoch: u64, revoke_epoch: u64) -> AssignmentDocument {
        let shards = BTreeMap::from([
            (
                "s-0".to_owned(),
                ShardRecord {
                    owner: Some("a".into()),
                    state: ShardPhase::Revoking,
                    handoff: Some(Box::new(Handoff {
                        to: Some("b".into()),
                        since: t(0),
                        epoch: revoke_epoch,
                        lease_counter: None,
                    })),
                    ..ShardRecord::default()
                },
            ),
            (
                "s-1".to_owned(),
                ShardRecord {
                    owner: Some("b".into()),
                    ..ShardRecord::default()
                },
            ),
        ]);
        AssignmentDocument::from_shards("ns/g", epoch, shards, [])
    }

    fn release(shard: &str, epoch: u64, checkpoint: Option<&str>) -> ReleaseRequest {
        ReleaseRequest {
            shard: shard.into(),
            epoch,
            checkpoint: checkpoint.map(str::to_owned),
        }
    }

    /// A store synced with a document, and the reconcile requests it makes.
    fn store() -> (
        Releases,
        impl futures::Stream<Item = Requested> + Unpin,
        GroupKey,
    ) {
        let requests = ReconcileRequests::default();
        let asked = Box::pin(requests.listen());
        let releases = Releases::new(requests);
        let key = GroupKey::new("ns", "g");
        releases.sync_group(&key, Some(&doc(7, 6)));
        (releases, asked, key)
    }

    /// The next request already made, if any.
    fn next_request(
        asked: &mut (impl futures::Stream<Item = Requested> + Unpin),
    ) -> Option<Requested> {
        asked.next().now_or_never().flatten()
    }

    #[test]
    fn an_accepted_release_is_evidence_and_asks_for_a_reconcile() {
        let (releases, mut asked, key) = store();
        let outcome = releases.submit(&key, "a", "ua", &release("s-0", 6, Some("c9")), t(1));
        assert_eq!(outcome, Ok(ReleaseOutcome::Accepted));
        assert_eq!(
            next_request(&mut asked),
            Some(Requested::Group(key.clone()))
        );
        let acks = releases.observe(&key);
        let ack = &acks.acks["s-0"];
        assert_eq!(
            (ack.pod.as_str(), ack.uid.as_str(), ack.epoch),
            ("a", "ua", 6)
        );
        assert_eq!(ack.checkpoint.as_deref(), Some("c9"));
    }

    #[test]
    fn a_repeated_release_is_a_duplicate_even_after_the_handoff_completed() {
        let (releases, mut asked, key) = store();
        let first = release("s-0", 7, None);
        assert_eq!(
            releases.submit(&key, "a", "ua", &first, t(1)),
            Ok(ReleaseOutcome::Accepted)
        );
        assert_eq!(
            releases.submit(&key, "a", "ua", &first, t(2)),
            Ok(ReleaseOutcome::Duplicate)
        );
        // The handoff completed: s-0 is active on b at epoch 8.
        let mut done = doc(8, 6);
        done.shards.get_mut("s-0").unwrap().state = ShardPhase::Active;
        done.shards.get_mut("s-0").unwrap().owner = Some("b".into());
        done.shards.get_mut("s-0").unwrap().handoff = None;
        releases.sync_group(&key, Some(&done));
        assert_eq!(
            releases.submit(&key, "a", "ua", &first, t(3)),
            Ok(ReleaseOutcome::Duplicate)
        );
        assert!(
            releases.observe(&key).acks.is_empty(),
            "no longer evidence of anything"
        );
        let with_other_checkpoint = release("s-0", 7, Some("x"));
        assert!(matches!(
            releases.submit(&key, "a", "ua", &with_other_checkpoint, t(4)),
            Err(ReleaseRejection::Conflict { .. })
        ));
        assert_eq!(next_request(&mut asked), Some(Requested::Group(key)));
        assert!(
            next_request(&mut asked).is_none(),
            "only the accepted release asked for a reconcile"
        );
    }

    #[test]
    fn releases_the_pod_does_not_hold_or_at_the_wrong_epoch_are_refused() {
        let (releases, _requests, key) = store();
        let cases = [
            ("b", release("s-0", 7, None), "NotRevoking"),
            ("a", release("s-1", 7, None), "NotRevoking"),
            ("a", release("s-9", 7, None), "NotRevoking"),
            ("a", release("s-0", 5, None), "StaleEpoch"),
            ("a", release("s-0", 8, None), "FutureEpoch"),
            // Not revoking in the document synced here (epoch 7), but in a
            // newer one the pod already saw: retried, not dropped.
            ("a", release("s-1", 8, None), "FutureEpoch"),
        ];
        for (pod, request, reason) in cases {
            let error = releases.submit(&key, pod, "u", &request, t(1)).unwrap_err();
            assert_eq!(error.reason(), reason, "{pod} {request:?}: {error}");
        }
        let unknown = GroupKey::new("ns", "other");
        let error = releases
            .submit(&unknown, "a", "u", &release("s-0", 7, None), t(1))
            .unwrap_err();
        assert_eq!(error.reason(), "UnknownShardGroup");
        assert!(releases.observe(&key).acks.is_empty());
    }

    #[test]
    fn a_new_revoke_of_the_shard_drops_the_ack_of_the_earlier_one() {
        let (releases, _requests, key) = store();
        releases
            .submit(&key, "a", "ua", &release("s-0", 6, None), t(1))
            .unwrap();
        // s-0 went to b, came back to a, and is revoked from a again at 12.
        releases.sync_group(&key, Some(&doc(12, 12)));
        assert!(releases.observe(&key).acks.is_empty());
        assert_eq!(
            releases.submit(&key, "a", "ua", &release("s-0", 12, None), t(2)),
            Ok(ReleaseOutcome::Accepted)
        );
    }
}
