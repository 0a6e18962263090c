//! The drain clocks of [`drain_clocks`]: each revoke counts from its own
//! delivery to its pod (revokes added to the pod later do not start it
//! again), a delivery is kept while the pod's object is away or new, and
//! without annotations the document's publication is the delivery.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::{secs, t0};
use crate::crds::Handoff;
use crate::crds::{AssignmentDocument, PodAssignment, PodView, ShardPhase, ShardRecord};
use crate::handoff::clocks::{Deliveries, delivered_at, drain_clocks};
use crate::observation::PodInfo;

/// A document in which pod `a` is revoking each shard of `revokes`, each
/// published at its time, to pod `b`.
fn document(revokes: &[(&str, Timestamp)]) -> AssignmentDocument {
    let shards = revokes
        .iter()
        .map(|(id, since)| {
            let record = ShardRecord {
                owner: Some("a".into()),
                state: ShardPhase::Revoking,
                handoff: Some(Box::new(Handoff {
                    to: Some("b".into()),
                    since: *since,
                    epoch: 2,
                    lease_counter: None,
                })),
                ..Default::default()
            };
            ((*id).to_owned(), record)
        })
        .collect();
    let revoking = revokes.iter().map(|(id, _)| (*id).to_owned()).collect();
    AssignmentDocument {
        api_version: "shardring.io/v1alpha1".into(),
        kind: "Assignment".into(),
        shard_group: "orders".into(),
        epoch: 2,
        pods: BTreeMap::from([(
            "a".to_owned(),
            PodAssignment {
                revoking,
                ..Default::default()
            },
        )]),
        shards,
    }
}

/// Pod `a` whose annotation lists `revoking` as revoking.
fn pod_listing(revoking: &[&str]) -> PodInfo {
    let view = PodView {
        epoch: 2,
        revoking: revoking.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    };
    PodInfo {
        name: "a".into(),
        annotation: Some(view.to_annotation()),
        ..Default::default()
    }
}

fn clocks(
    remembered: &Deliveries,
    doc: &AssignmentDocument,
    pod: Option<&PodInfo>,
    now: Timestamp,
) -> Deliveries {
    let pods: BTreeMap<&str, &PodInfo> = pod.iter().map(|p| ("a", *p)).collect();
    drain_clocks(remembered, Some(doc), &pods, true, now)
}

#[test]
fn a_later_revoke_to_the_same_pod_does_not_restart_an_older_ones_clock() {
    // s1 is revoked at t0; the pod's annotation lists it a second later.
    let first = document(&[("s1", t0())]);
    let at_1 = clocks(
        &Deliveries::new(),
        &first,
        Some(&pod_listing(&["s1"])),
        t0() + secs(1),
    );
    assert_eq!(at_1["a"], [t0() + secs(1)]);
    // s2 is revoked from the same pod 20 s later and delivered at 21 s.
    let second = document(&[("s1", t0()), ("s2", t0() + secs(20))]);
    let before_delivery = clocks(&at_1, &second, Some(&pod_listing(&["s1"])), t0() + secs(20));
    assert_eq!(
        before_delivery["a"],
        [t0() + secs(1)],
        "s2 not delivered yet"
    );
    let at_21 = clocks(
        &at_1,
        &second,
        Some(&pod_listing(&["s1", "s2"])),
        t0() + secs(21),
    );
    assert_eq!(at_21["a"], [t0() + secs(1), t0() + secs(21)]);
    // s1 still counts from 1 s (its drain timeout is not pushed back by
    // s2), s2 from its own delivery.
    assert_eq!(delivered_at(&at_21["a"], t0()), Some(t0() + secs(1)));
    assert_eq!(
        delivered_at(&at_21["a"], t0() + secs(20)),
        Some(t0() + secs(21))
    );
    // Once s1's handoff ended, its delivery is no longer kept.
    let only_s2 = document(&[("s2", t0() + secs(20))]);
    let after = clocks(
        &at_21,
        &only_s2,
        Some(&pod_listing(&["s2"])),
        t0() + secs(25),
    );
    assert_eq!(after["a"], [t0() + secs(21)]);
}

#[test]
fn a_delivery_is_kept_while_the_pods_object_is_away_or_new() {
    let doc = document(&[("s1", t0())]);
    let delivered = clocks(
        &Deliveries::new(),
        &doc,
        Some(&pod_listing(&["s1"])),
        t0() + secs(1),
    );
    // The pod's object is deleted (a StatefulSet pod) ...
    let away = clocks(&delivered, &doc, None, t0() + secs(5));
    assert_eq!(away["a"], [t0() + secs(1)]);
    // ... and created again under its name with a fresh annotation that
    // lists the revoke again: the clock still runs from the first delivery.
    let back = clocks(&away, &doc, Some(&pod_listing(&["s1"])), t0() + secs(9));
    assert_eq!(back["a"], [t0() + secs(1)]);
    // A new pod without the annotation keeps it too.
    let bare = PodInfo {
        name: "a".into(),
        ..Default::default()
    };
    assert_eq!(
        clocks(&away, &doc, Some(&bare), t0() + secs(9))["a"],
        [t0() + secs(1)]
    );
}

#[test]
fn no_clock_runs_before_the_annotation_lists_every_revoke() {
    let doc = document(&[("s1", t0()), ("s2", t0())]);
    let partial = clocks(
        &Deliveries::new(),
        &doc,
        Some(&pod_listing(&["s1"])),
        t0() + secs(1),
    );
    assert!(partial.is_empty(), "{partial:?}");
    let none = clocks(&Deliveries::new(), &doc, None, t0() + secs(1));
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn without_annotations_the_publication_is_the_delivery() {
    let doc = document(&[("s1", t0()), ("s2", t0() + secs(20))]);
    let pods = BTreeMap::new();
    let clocks = drain_clocks(
        &Deliveries::new(),
        Some(&doc),
        &pods,
        false,
        t0() + secs(21),
    );
    assert_eq!(clocks["a"], [t0(), t0() + secs(20)]);
}
