//! The echo bookkeeping alone: exact versions, several writes to one
//! object, events held during a write and judged when it lands, and the
//! bounds on what is kept.

use std::time::{Duration, Instant};

use super::*;

type Key = (&'static str, &'static str);
const DOC: Key = ("ConfigMap", "doc");
const POD_A: Key = ("Pod", "a");
const POD_B: Key = ("Pod", "b");

fn echoes() -> Echoes<Key, Instant> {
    Echoes::default()
}

fn answer(version: &str) -> Answer<Instant> {
    Answer {
        version: version.to_owned(),
        uid: "uid-1".to_owned(),
        at: Instant::now(),
    }
}

#[test]
fn only_the_exact_version_written_is_an_echo_and_only_once() {
    let mut own = echoes();
    own.record(POD_A, answer("10"));
    // Another change to the pod (before or after the write) is no echo.
    assert!(!own.is_echo(&POD_A, "9"));
    assert!(!own.is_echo(&POD_B, "10"));
    // Nor is another kind of object of the same name and version.
    assert!(!own.is_echo(&("ConfigMap", "a"), "10"));
    assert!(own.is_echo(&POD_A, "10"));
    // Seen once: a relist at the same version wakes the group again.
    assert!(!own.is_echo(&POD_A, "10"));
    assert_eq!(own.pending(), 0);
}

#[test]
fn each_of_several_writes_to_one_object_is_an_echo_and_a_deletion_forgets() {
    let mut own = echoes();
    // Three groups annotate one pod at once; a fourth change between them
    // is somebody else's.
    for version in ["10", "12", "13"] {
        own.record(POD_A, answer(version));
    }
    assert!(own.is_echo(&POD_A, "10"));
    assert_eq!(own.judge(&POD_A, "11"), Verdict::Change);
    assert_eq!(own.judge(&POD_A, "12"), Verdict::Echo);
    assert_eq!(own.pending(), 1);
    // The pod is deleted, and a successor of its name written before the
    // deletion's event arrived: only the deleted pod's writes are forgotten.
    own.record(
        POD_A,
        Answer {
            uid: "uid-2".into(),
            ..answer("14")
        },
    );
    own.forget(&POD_A, "uid-1");
    assert_eq!(own.pending(), 1);
    assert!(!own.is_echo(&POD_A, "13"));
    assert!(own.is_echo(&POD_A, "14"));
}

#[test]
fn a_later_echo_spends_the_earlier_writes_and_the_pending_are_bounded() {
    let mut own = echoes();
    own.record(POD_A, answer("10"));
    own.record(POD_A, answer("12"));
    // The watch relisted past 10: its echo never comes, 12's does.
    assert!(own.is_echo(&POD_A, "12"));
    assert_eq!(own.pending(), 0);
    assert!(!own.is_echo(&POD_A, "10"));
    for version in 0..2 * PENDING_PER_OBJECT {
        own.record(POD_B, answer(&version.to_string()));
    }
    assert_eq!(own.pending(), PENDING_PER_OBJECT);
    assert!(!own.is_echo(&POD_B, "0"), "the oldest went");
    assert!(own.is_echo(&POD_B, &(2 * PENDING_PER_OBJECT - 1).to_string()));
    assert_eq!(own.pending(), 0);
}

#[test]
fn an_echo_that_beats_its_answer_is_held_and_spent_when_the_write_lands() {
    let mut own = echoes();
    own.begin(DOC);
    // The watch delivers version 5 before the write's answer is in.
    assert_eq!(own.judge(&DOC, "5"), Verdict::Held);
    // Another object's event is not held.
    assert_eq!(own.judge(&POD_A, "5"), Verdict::Change);
    assert!(!own.land(&DOC, Some(answer("5"))), "its own echo");
    assert_eq!(own.pending(), 0, "the echo was spent");
    assert!(!own.in_flight(&DOC));
    assert_eq!(own.judge(&DOC, "6"), Verdict::Change, "no flight left");
}

#[test]
fn a_change_held_during_a_write_is_one_when_the_write_lands() {
    let mut own = echoes();
    own.begin(DOC);
    // Someone else's change lands just before the write, and its echo.
    assert!(own.hold(&DOC, "4"));
    assert!(own.hold(&DOC, "5"));
    assert!(own.land(&DOC, Some(answer("5"))), "4 was a change");
    assert_eq!(own.pending(), 0, "the echo among them was spent");
    // Stored otherwise than sent: nothing held is taken for its echo.
    own.begin(DOC);
    assert!(own.hold(&DOC, "7"));
    assert!(own.land(&DOC, None));
    // Nothing held: no change.
    own.begin(DOC);
    assert!(!own.land(&DOC, Some(answer("9"))));
    // A write that lands unannounced (its flight ended already) holds
    // nothing.
    assert!(!own.land(&DOC, None));
}

#[test]
fn events_held_by_two_writes_are_judged_when_the_last_lands() {
    let mut own = echoes();
    own.begin(DOC);
    own.begin(DOC);
    assert!(own.hold(&DOC, "4"));
    // The first write failed: still held while the other is on its way.
    assert!(!own.land(&DOC, None));
    assert!(own.in_flight(&DOC));
    assert!(own.hold(&DOC, "5"));
    assert!(own.land(&DOC, Some(answer("5"))), "4 was not its echo");
    assert!(!own.in_flight(&DOC));
    assert_eq!(own.pending(), 0);
}

#[test]
fn a_write_awaits_its_echo_until_it_comes_its_time_passes_or_a_deletion() {
    let mut own: Echoes<Key, jiff::Timestamp> = Echoes::default();
    let t0: jiff::Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
    let after = |ms: i64| t0 + jiff::SignedDuration::from_millis(ms);
    assert_eq!(own.awaits_echo(&DOC, t0), None);
    let written = |version: &str| Answer {
        version: version.to_owned(),
        uid: "uid-1".to_owned(),
        at: t0,
    };
    own.record(DOC, written("3"));
    assert_eq!(
        own.awaits_echo(&DOC, after(2_500)),
        ECHO_DUE.checked_sub(Duration::from_millis(2_500))
    );
    assert_eq!(own.awaits_echo(&DOC, after(10_000)), None, "past ECHO_DUE");
    // A clock that went back takes no time to have passed.
    assert_eq!(own.awaits_echo(&DOC, after(-5)), Some(ECHO_DUE));
    assert_eq!(own.awaits_echo(&POD_A, after(1)), None);
    assert!(own.unspent(&DOC));
    assert!(own.is_echo(&DOC, "3"));
    assert_eq!(own.awaits_echo(&DOC, after(1)), None);
    assert!(!own.unspent(&DOC));
    own.record(DOC, written("4"));
    own.forget(&DOC, "uid-1");
    assert_eq!(own.awaits_echo(&DOC, after(1)), None);
}
