//! Evidence `release_acked` through the real plan step: an acknowledgement
//! from the revoked owner at the revoke's epoch completes the handoff at
//! once (with or without a lease table, long before any timeout) and hands
//! its checkpoint to the next owner; an acknowledgement about an earlier
//! revoke, from another pod, or from another pod object of the same name
//! does not.

use super::*;
use crate::crds::AssignmentDocument;
use crate::observation::ReleaseAck;

/// The shards revoked from `a`, with the epoch their revoke carries.
fn revoked_from_a(obs: &Observation) -> Vec<(String, u64)> {
    let doc = obs.published.document().unwrap();
    doc.shards
        .iter()
        .filter(|(_, r)| r.state == ShardPhase::Revoking && r.owner.as_deref() == Some("a"))
        .map(|(id, r)| (id.clone(), r.handoff.as_ref().unwrap().epoch))
        .collect()
}

fn ack(pod: &str, uid: &str, epoch: u64, checkpoint: Option<&str>) -> ReleaseAck {
    ReleaseAck {
        pod: pod.into(),
        uid: uid.into(),
        epoch,
        checkpoint: checkpoint.map(str::to_owned),
        at: t0(),
    }
}

fn with_acks(
    mut obs: Observation,
    acks: impl IntoIterator<Item = (String, ReleaseAck)>,
) -> Observation {
    obs.releases.acks = acks.into_iter().collect();
    obs
}

fn document(decision: &Decision) -> &AssignmentDocument {
    decision
        .document_write
        .as_ref()
        .map(|w| &w.document)
        .expect("a new document")
}

#[test]
fn a_revoke_carries_the_epoch_of_the_document_that_first_publishes_it() {
    let obs = a_revoked(false);
    let doc = obs.published.document().unwrap();
    let revoked = revoked_from_a(&obs);
    assert_eq!(revoked.len(), 2);
    for (_, epoch) in &revoked {
        assert_eq!(*epoch, doc.epoch, "first published in this document");
    }
    // Kept as it was while the revoke waits.
    let later = settle(Observation {
        now: t0() + secs(2),
        ..obs.clone()
    });
    assert_eq!(revoked_from_a(&later), revoked);
}

#[test]
fn the_owners_ack_completes_the_handoff_at_once_and_hands_over_its_checkpoint() {
    both(|lease_table| {
        let obs = a_revoked(lease_table);
        let revoked = revoked_from_a(&obs);
        let (shard, epoch) = revoked[0].clone();
        let obs = with_acks(
            obs,
            [(shard.clone(), ack("a", "uid-a", epoch, Some("seq-42")))],
        );
        let decision = plan(&obs);
        assert_eq!(
            evidence(&decision),
            [Evidence::ReleaseAcked],
            "lease table: {lease_table}"
        );
        let record = &document(&decision).shards[&shard];
        assert_eq!(record.state, ShardPhase::Active);
        assert_eq!(record.owner.as_deref(), Some("b"));
        assert_eq!(
            record.checkpoint.as_deref().map(String::as_str),
            Some("seq-42")
        );
        // The other revoked shard was not acknowledged: still revoking.
        assert_eq!(
            document(&decision).shards[&revoked[1].0].state,
            ShardPhase::Revoking
        );

        // The checkpoint stays with the shard while it stays on `b`.
        let mut next = settle(obs);
        next.now = t0() + secs(2);
        next.releases = Default::default();
        let again = plan(&next);
        let doc = again
            .document_write
            .as_ref()
            .map(|w| &*w.document)
            .or(next.published.document())
            .unwrap();
        assert_eq!(
            doc.shards[&shard].checkpoint.as_deref().map(String::as_str),
            Some("seq-42")
        );
    });
}

#[test]
fn the_acked_checkpoint_goes_over_also_when_the_pod_is_seen_stopped_first() {
    both(|lease_table| {
        let mut obs = a_revoked(lease_table);
        let (shard, epoch) = revoked_from_a(&obs)[0].clone();
        // `a` acknowledged, then exited before the next reconcile: the
        // kubelet's word is checked first and completes both handoffs.
        obs.pods[0].containers = Containers::Stopped;
        let obs = with_acks(
            obs,
            [(shard.clone(), ack("a", "uid-a", epoch, Some("seq-7")))],
        );
        let decision = plan(&obs);
        assert_eq!(
            evidence(&decision),
            [Evidence::PodStopped, Evidence::PodStopped],
            "lease table: {lease_table}"
        );
        let doc = document(&decision);
        assert_eq!(
            doc.shards[&shard].checkpoint.as_deref().map(String::as_str),
            Some("seq-7")
        );
        let other = &revoked_from_a(&a_revoked(lease_table))[1].0;
        assert_eq!(doc.shards[other].checkpoint, None, "nothing acknowledged");
    });
}

#[test]
fn an_ack_at_a_later_epoch_than_the_revoke_counts() {
    let obs = a_revoked(false);
    let (shard, epoch) = revoked_from_a(&obs)[0].clone();
    let obs = with_acks(obs, [(shard, ack("a", "uid-a", epoch + 3, None))]);
    assert_eq!(evidence(&plan(&obs)), [Evidence::ReleaseAcked]);
}

#[test]
fn acks_that_do_not_speak_for_the_revoked_owner_are_not_evidence() {
    both(|lease_table| {
        let obs = a_revoked(lease_table);
        let (shard, epoch) = revoked_from_a(&obs)[0].clone();
        let cases = [
            (
                "an earlier revoke's epoch",
                ack("a", "uid-a", epoch - 1, None),
            ),
            ("another pod", ack("b", "uid-b", epoch, None)),
            (
                "another pod object named a",
                ack("a", "uid-old-a", epoch, None),
            ),
        ];
        for (case, ack) in cases {
            let obs = with_acks(obs.clone(), [(shard.clone(), ack)]);
            assert!(
                plan(&obs).handoffs.is_empty(),
                "{case}, lease table: {lease_table}"
            );
        }
    });
}

#[test]
fn an_ack_is_not_evidence_while_an_earlier_pod_of_the_name_may_still_run() {
    let mut obs = a_revoked(false);
    let (shard, epoch) = revoked_from_a(&obs)[0].clone();
    // A StatefulSet's pod: its name is reused. An earlier `a` left by a
    // force deletion (its last status still running).
    obs.pods[0].generated_name = false;
    obs.departed = remembered(vec![Departure {
        uid: "uid-old-a".into(),
        generated_name: false,
        ..departure(Containers::Running)
    }]);
    let stuck = with_acks(obs.clone(), [(shard, ack("a", "uid-a", epoch, None))]);
    assert!(plan(&stuck).handoffs.is_empty());
    // Once that earlier pod is known to have stopped, the ack counts.
    let mut fine = stuck;
    fine.departed = remembered(vec![Departure {
        uid: "uid-old-a".into(),
        generated_name: false,
        ..departure(Containers::Stopped)
    }]);
    assert_eq!(evidence(&plan(&fine)), [Evidence::ReleaseAcked]);
}

#[test]
fn an_ack_of_a_pod_gone_since_counts_even_after_a_force_deletion() {
    let mut obs = a_revoked(false);
    let (shard, epoch) = revoked_from_a(&obs)[0].clone();
    obs.pods.remove(0);
    let acked = with_acks(obs, [(shard, ack("a", "uid-a", epoch, None))]);
    // Gone, its departure not seen (a restart since): its word stands.
    assert_eq!(evidence(&plan(&acked)), [Evidence::ReleaseAcked]);
    // Force-deleted, its last status still running: its word stands too.
    let mut forced = acked;
    forced.departed = remembered(vec![departure(Containers::Running)]);
    assert_eq!(evidence(&plan(&forced)), [Evidence::ReleaseAcked]);
}

#[test]
fn a_recovered_revoke_carries_the_epoch_of_the_view_that_listed_it() {
    let mut obs = a_revoked(false);
    let epoch = revoked_from_a(&obs)[0].1;
    obs.published = Published::Missing;
    let recovered = crate::handoff::recover_previous(&obs).expect("rebuilt from the annotations");
    for record in recovered.shards.values() {
        if record.state == ShardPhase::Revoking {
            assert_eq!(record.handoff.as_ref().unwrap().epoch, epoch);
        }
    }
}
