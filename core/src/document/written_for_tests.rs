//! The shortcut of the annotation comparison: a pod's annotation is taken
//! as its lists' without parsing only when it is byte for byte what the
//! operator writes for them, and then the pod gets no write; anything else
//! goes through the parse and is compared as before.

use super::{PodAssignment, annotation_writes, written_for};
use crate::crds::{AssignmentDocument, PodView};
use crate::fixtures;

fn lists(active: &[&str], standby: &[&str], revoking: &[&str], held: &[&str]) -> PodAssignment {
    let owned = |ids: &[&str]| ids.iter().map(|id| (*id).to_owned()).collect();
    PodAssignment {
        active: owned(active),
        standby: owned(standby),
        revoking: owned(revoking),
        held: owned(held),
    }
}

fn written(epoch: u64, lists: &PodAssignment) -> String {
    PodView {
        epoch,
        active: lists.active.clone(),
        standby: lists.standby.clone(),
        revoking: lists.revoking.clone(),
        held: lists.held.clone(),
    }
    .to_annotation()
}

#[test]
fn what_the_operator_writes_for_the_lists_is_taken_at_any_epoch() {
    let mut scratch = Vec::new();
    for lists in [
        lists(&[], &[], &[], &[]),
        lists(&["shard-1", "shard-2"], &["shard-9"], &[], &[]),
        lists(&["a\"quoted\\id", "ünï"], &[], &["r"], &["h1", "h2"]),
    ] {
        for epoch in [0, 7, 10, u64::MAX] {
            let text = written(epoch, &lists);
            assert!(written_for(&text, &lists, &mut scratch), "{text}");
        }
    }
}

#[test]
fn anything_but_the_exact_form_for_the_lists_is_not_taken() {
    let mut scratch = Vec::new();
    let wanted = lists(&["s1", "s2"], &[], &[], &[]);
    let exact = written(4, &wanted);
    assert_eq!(
        exact,
        r#"{"epoch":4,"active":["s1","s2"],"standby":[],"revoking":[]}"#
    );
    for text in [
        // Other lists.
        written(4, &lists(&["s1"], &[], &[], &[])),
        written(4, &lists(&["s1", "s2"], &[], &["s3"], &[])),
        written(4, &lists(&["s1", "s2"], &[], &[], &["s3"])),
        written(4, &lists(&["s2", "s1"], &[], &[], &[])),
        // The same lists in another form: left to the parse.
        r#"{"epoch":04,"active":["s1","s2"],"standby":[],"revoking":[]}"#.to_owned(),
        r#"{"epoch":18446744073709551616,"active":["s1","s2"],"standby":[],"revoking":[]}"#
            .to_owned(),
        r#"{"epoch": 4,"active":["s1","s2"],"standby":[],"revoking":[]}"#.to_owned(),
        r#"{"epoch":4,"active":["s1","s2"]}"#.to_owned(),
        r#"{"active":["s1","s2"],"standby":[],"revoking":[],"epoch":4}"#.to_owned(),
        r#"{"epoch":,"active":["s1","s2"],"standby":[],"revoking":[]}"#.to_owned(),
        format!("{exact} "),
        String::new(),
    ] {
        assert!(!written_for(&text, &wanted, &mut scratch), "{text}");
    }
}

#[test]
fn pods_get_a_write_exactly_when_their_annotation_does_not_parse_to_their_lists() {
    let mut doc = AssignmentDocument::new("ns/g", 9);
    doc.pods
        .insert("p-exact".into(), lists(&["s1"], &[], &[], &[]));
    doc.pods
        .insert("p-spaced".into(), lists(&["s2"], &[], &[], &[]));
    doc.pods
        .insert("p-stale".into(), lists(&["s3"], &[], &[], &[]));
    doc.pods
        .insert("p-broken".into(), lists(&["s4"], &[], &[], &[]));
    let annotated = |name: &str, text: &str| {
        let mut pod = fixtures::pod_info(name);
        pod.annotation = Some(text.to_owned());
        pod
    };
    let pods = [
        annotated(
            "p-broken",
            r#"{"epoch":03,"active":["s4"],"standby":[],"revoking":[]}"#,
        ),
        annotated("p-exact", &written(2, &lists(&["s1"], &[], &[], &[]))),
        // The same lists in a form the operator does not write: parsed, equal.
        annotated("p-spaced", r#"{ "epoch": 5, "active": ["s2"] }"#),
        annotated("p-stale", &written(8, &lists(&["s3", "s5"], &[], &[], &[]))),
    ];
    let (writes, oversized) = annotation_writes(&doc, &pods, "k");
    let written: Vec<&str> = writes.iter().map(|w| w.pod.as_str()).collect();
    assert_eq!(written, ["p-broken", "p-stale"]);
    assert!(oversized.is_empty());
}
