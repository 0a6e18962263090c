//! A group that publishes no pod annotations (`spec.output.podAnnotations:
//! false`) through the real plan step: it writes none and removes those it
//! wrote before, a revoke's drain timeout counts from its publish in the
//! document, and a lost document (nothing to rebuild it from) revokes every
//! shard from whoever may still read it before any is active again.

use super::*;
use crate::handoff::UNKNOWN_READER;

/// [`settled`], then switched to publishing no annotations: the switch's
/// plan takes them off both pods.
fn settled_without_annotations(lease_table: bool) -> Observation {
    let mut obs = settled(lease_table);
    assert!(obs.pods.iter().all(|p| p.annotation.is_some()));
    obs.group.spec.output.pod_annotations = Some(false);
    let decision = plan(&obs);
    assert!(
        decision.document_write.is_none(),
        "the document stays as it is"
    );
    let removed: Vec<(&str, bool)> = decision
        .annotation_writes
        .iter()
        .map(|w| (w.pod.as_str(), w.view.is_none()))
        .collect();
    assert_eq!(removed, [("a", true), ("b", true)]);
    let obs = settle(obs);
    assert!(obs.pods.iter().all(|p| p.annotation.is_none()));
    obs
}

fn states(obs: &Observation) -> Vec<(String, ShardPhase, Option<String>)> {
    obs.published
        .document()
        .expect("published")
        .shards
        .iter()
        .map(|(id, r)| (id.clone(), r.state, r.owner.clone()))
        .collect()
}

#[test]
fn a_group_without_annotations_writes_none_from_its_first_publish() {
    let mut group = fixtures::static_group("prod", "orders", "consumers", 4, "orders-{index}");
    group.spec.output.pod_annotations = Some(false);
    let mut obs = settled(false);
    obs.group = group;
    obs.published = Published::Missing;
    obs.group.status = None;
    for pod in &mut obs.pods {
        pod.annotation = None;
    }
    let decision = plan(&obs);
    assert!(
        decision.document_write.is_some(),
        "the document is published"
    );
    assert!(decision.annotation_writes.is_empty());
}

#[test]
fn without_annotations_a_revoke_drains_from_its_publish() {
    let mut obs = settled_without_annotations(false);
    obs.now = t0();
    obs.pods[0].ready = false;
    let mut obs = settle(obs);
    let revoking = states(&obs)
        .into_iter()
        .filter(|(_, state, _)| *state == ShardPhase::Revoking)
        .count();
    assert_eq!(revoking, 2, "a's shards are revoked at t0");
    // No annotation can show the revoke delivered: the document is the
    // delivery, so the drain timeout (30 s) counts from its publish.
    obs.now = t0() + secs(29);
    assert_eq!(evidence(&plan(&obs)), []);
    obs.now = t0() + secs(30);
    let decision = plan(&obs);
    assert_eq!(evidence(&decision), [Evidence::DrainTimeout; 2]);
    assert!(decision.annotation_writes.is_empty());
}

#[test]
fn a_lost_document_without_annotations_is_revoked_from_an_unknown_reader() {
    let mut obs = settled_without_annotations(false);
    obs.published = Published::Missing;
    obs.now = t0();
    let mut obs = settle(obs);
    // Every shard revoked, none active anywhere: a consumer may still read
    // its last copy of the lost document.
    for (id, state, owner) in states(&obs) {
        assert_eq!(state, ShardPhase::Revoking, "{id}");
        assert_eq!(owner.as_deref(), Some(UNKNOWN_READER), "{id}");
    }
    obs.now = t0() + secs(29);
    let mut obs = settle(obs);
    assert!(
        states(&obs)
            .iter()
            .all(|(_, state, _)| *state == ShardPhase::Revoking),
        "nothing is active before the drain timeout"
    );
    obs.now = t0() + secs(30);
    let decision = plan(&obs);
    assert_eq!(evidence(&decision), [Evidence::DrainTimeout; 4]);
    let obs = settle(obs);
    let owners: Vec<Option<String>> = states(&obs).into_iter().map(|(_, _, o)| o).collect();
    assert_eq!(
        owners.iter().filter(|o| o.as_deref() == Some("a")).count(),
        2
    );
    assert_eq!(
        owners.iter().filter(|o| o.as_deref() == Some("b")).count(),
        2
    );
    assert!(
        states(&obs)
            .iter()
            .all(|(_, state, _)| *state == ShardPhase::Active)
    );
}

#[test]
fn a_lost_document_with_a_lease_table_goes_back_to_the_lease_owners() {
    let mut obs = settled_without_annotations(true);
    let before = states(&obs);
    obs.published = Published::Missing;
    obs.now = t0();
    let recovered = crate::handoff::revoke_unknown_readers(
        &obs,
        obs.topology.last_good.as_deref().unwrap(),
        obs.group.status.as_ref().unwrap().epoch,
    )
    .expect("the group published before");
    for (id, record) in &recovered.shards {
        assert_eq!(record.state, ShardPhase::Revoking, "{id}");
        assert_eq!(record.handoff.as_ref().unwrap().lease_counter, Some(7));
    }
    // The lease owners are the readers: where the plan keeps a shard on
    // its lease owner, it is active there again at once; nothing goes to
    // another pod.
    let obs = settle(obs);
    assert_eq!(states(&obs), before);
}

#[test]
fn a_lost_document_is_still_rebuilt_from_annotations_where_pods_carry_them() {
    let mut obs = settled(false);
    let before = states(&obs);
    obs.published = Published::Missing;
    obs.now = t0();
    let obs = settle(obs);
    assert_eq!(states(&obs), before, "the pods' views are the document");
}

/// `obs`'s document as the operator held it, its ConfigMap deleted since.
fn deleted(obs: &mut Observation) -> u64 {
    let last = obs.published.document().expect("published").clone();
    let epoch = last.epoch;
    obs.published = Published::Deleted(std::sync::Arc::new(last));
    epoch
}

#[test]
fn a_deleted_document_the_operator_held_is_written_back_as_it_was() {
    let mut obs = settled_without_annotations(false);
    let before = states(&obs);
    let epoch = deleted(&mut obs);
    obs.now = t0();
    let decision = plan(&obs);
    let written = decision.document_write.as_ref().expect("written back");
    assert!(written.document.epoch > epoch, "a newer epoch");
    let obs = settle(obs);
    assert_eq!(states(&obs), before, "nothing revoked, nothing moved");
}

#[test]
fn a_held_document_behind_the_status_is_not_trusted() {
    let mut obs = settled_without_annotations(false);
    let epoch = deleted(&mut obs);
    // Another replica published since; this one never saw it.
    obs.group.status.as_mut().unwrap().epoch = epoch + 1;
    obs.now = t0();
    let obs = settle(obs);
    for (id, state, owner) in states(&obs) {
        assert_eq!(state, ShardPhase::Revoking, "{id}");
        assert_eq!(owner.as_deref(), Some(UNKNOWN_READER), "{id}");
    }
}

#[test]
fn a_group_created_again_ignores_what_was_held_of_its_namesake() {
    let mut obs = settled_without_annotations(false);
    deleted(&mut obs);
    obs.group.status = None;
    obs.now = t0();
    let obs = settle(obs);
    let doc = obs.published.document().unwrap();
    assert_eq!(doc.epoch, 1, "a first publish");
    assert!(
        states(&obs)
            .iter()
            .all(|(_, state, owner)| *state == ShardPhase::Active && owner.is_some())
    );
}
