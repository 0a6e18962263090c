//! The load book: what a reading must be to count, what it does to the
//! estimate, and how refusals are counted.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use shardring_crds::assignment::{AssignmentDocument, Handoff, ShardPhase, ShardRecord};
use shardring_crds::endpoint::{LoadReport, ShardRate};

use super::{Limits, LoadBook, ReportRefusal};
use crate::leases::{LeaseSnapshot, LeaseTable};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap() + SignedDuration::from_secs(s)
}

fn limits() -> Limits {
    Limits {
        half_life: Duration::from_secs(30),
        max_rate: 1024.0 * 1024.0,
    }
}

fn active(owner: &str) -> ShardRecord {
    ShardRecord {
        owner: Some(owner.into()),
        ..ShardRecord::default()
    }
}

/// `s-0` and `s-1` on `a`, `s-2` revoking from `b` to `a`, `s-3` pending.
fn doc(epoch: u64) -> AssignmentDocument {
    let shards = BTreeMap::from([
        ("s-0".to_owned(), active("a")),
        ("s-1".to_owned(), active("a")),
        (
            "s-2".to_owned(),
            ShardRecord {
                owner: Some("b".into()),
                state: ShardPhase::Revoking,
                handoff: Some(Box::new(Handoff {
                    to: Some("a".into()),
                    since: t(0),
                    epoch,
                    lease_counter: None,
                })),
                ..ShardRecord::default()
            },
        ),
        (
            "s-3".to_owned(),
            ShardRecord {
                state: ShardPhase::Pending,
                ..ShardRecord::default()
            },
        ),
    ]);
    AssignmentDocument::from_shards("ns/g", epoch, shards, [])
}

fn rate(shard: &str, bytes: f64) -> ShardRate {
    ShardRate {
        shard: shard.into(),
        bytes_per_second: bytes,
        records_per_second: 1.0,
    }
}

fn report(epoch: u64, shards: Vec<ShardRate>) -> LoadReport {
    LoadReport { epoch, shards }
}

#[test]
fn sound_readings_are_smoothed_and_unsound_ones_refused_with_a_reason() {
    let mut book = LoadBook::default();
    book.sync(Some(&doc(5)));
    let cases = vec![
        rate("s-0", 1000.0),
        rate("s-1", -1.0),
        rate("s-1", f64::NAN),
        rate("s-1", f64::INFINITY),
        rate("s-1", 2.0 * 1024.0 * 1024.0),
        rate("s-2", 10.0),
        rate("s-3", 10.0),
        rate("s-9", 10.0),
        ShardRate {
            records_per_second: -3.0,
            ..rate("s-1", 5.0)
        },
    ];
    let response = book
        .report("a", &report(5, cases), &limits(), t(1))
        .unwrap()
        .response();
    let (accepted, rejected) = (response.accepted, response.rejected);
    assert_eq!(accepted, 1);
    let reasons: Vec<(&str, &str)> = rejected
        .iter()
        .map(|r| (r.shard.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("s-1", "InvalidLoad"),
            ("s-1", "InvalidLoad"),
            ("s-1", "InvalidLoad"),
            ("s-1", "AbsurdLoad"),
            ("s-2", "NotOwner"),
            ("s-3", "NotOwner"),
            ("s-9", "UnknownShard"),
            ("s-1", "InvalidLoad"),
        ]
    );
    assert!(
        rejected[3].message.contains("maxShardKBps"),
        "{}",
        rejected[3].message
    );
    let seen = book.observe();
    assert_eq!(seen.estimates.len(), 1, "only the sound reading counts");
    assert_eq!(seen.rejected.total, 8);
    assert_eq!(seen.rejected.by_reason.get("InvalidLoad"), Some(&4));
    assert_eq!(
        seen.rejected.last.as_ref().map(|(r, _)| r.reason()),
        Some("InvalidLoad")
    );
    // The revoking owner may still report what it read.
    let recorded = book
        .report("b", &report(5, vec![rate("s-2", 10.0)]), &limits(), t(2))
        .unwrap();
    assert_eq!((recorded.accepted, recorded.rejected.len()), (1, 0));
}

#[test]
fn a_report_from_before_the_pods_ownership_or_from_the_future_is_refused() {
    let mut book = LoadBook::default();
    book.sync(Some(&doc(5)));
    // s-1 moves to c at epoch 9.
    let mut moved = doc(9);
    moved.shards.insert("s-1".into(), active("c"));
    book.sync(Some(&moved));
    let stale = book
        .report("c", &report(8, vec![rate("s-1", 10.0)]), &limits(), t(1))
        .unwrap();
    assert_eq!(stale.rejected[0].reason(), "StaleReport");
    let ok = book
        .report("c", &report(9, vec![rate("s-1", 10.0)]), &limits(), t(1))
        .unwrap();
    assert_eq!((ok.accepted, ok.rejected.len()), (1, 0));
    // s-0 stayed on a: its ownership predates the first sync, any epoch goes.
    let ok = book
        .report("a", &report(1, vec![rate("s-0", 10.0)]), &limits(), t(1))
        .unwrap();
    assert_eq!((ok.accepted, ok.rejected.len()), (1, 0));
    // The old owner's late report is not about its shard any more.
    let late = book
        .report("a", &report(5, vec![rate("s-1", 10.0)]), &limits(), t(2))
        .unwrap();
    assert_eq!(late.rejected[0].reason(), "NotOwner");
    assert_eq!(
        book.report("c", &report(10, vec![]), &limits(), t(2)),
        Err(ReportRefusal::FutureEpoch {
            epoch: 10,
            published: 9
        })
    );
    let many = (0..129).map(|i| rate(&format!("x-{i}"), 1.0)).collect();
    assert_eq!(
        book.report("c", &report(9, many), &limits(), t(2)),
        Err(ReportRefusal::TooManyShards(129))
    );
}

fn lease(shard: &str, counter: u64, kbps: Option<f64>) -> (String, LeaseSnapshot) {
    (
        shard.to_owned(),
        LeaseSnapshot {
            shard_id: shard.into(),
            owner: Some("a".into()),
            counter,
            counter_changed_at: t(0),
            checkpoint: None,
            sequence_number: None,
            complete: false,
            parents: Vec::new(),
            children: Vec::new(),
            checkpoint_owner: None,
            throughput_kbps: kbps,
        },
    )
}

#[test]
fn a_kcl_lease_is_read_once_per_renewal() {
    let mut book = LoadBook::default();
    book.sync(Some(&doc(5)));
    let table = |counter: u64, kbps: f64| LeaseTable {
        leases: BTreeMap::from([
            lease("s-0", counter, Some(kbps)),
            lease("s-1", counter, None),
            lease("s-1", counter, Some(-5.0)),
            lease("s-9", counter, Some(1.0)),
        ]),
        scanned_at: Some(t(0)),
        items: 4,
    };
    book.lease_readings(&table(1, 2.0), &limits(), t(1));
    book.lease_readings(&table(1, 2.0), &limits(), t(2));
    book.lease_readings(&table(1, 2.0), &limits(), t(3));
    let seen = book.observe();
    assert_eq!(
        seen.estimates["s-0"].readings, 1,
        "the same renewal is one reading"
    );
    assert!((seen.estimates["s-0"].rate - 2048.0).abs() < 1e-9);
    assert_eq!(seen.rejected.by_reason.get("InvalidLoad"), Some(&1));
    assert!(
        !seen.estimates.contains_key("s-9"),
        "not a shard of the group"
    );
    book.lease_readings(&table(2, 4.0), &limits(), t(4));
    assert_eq!(book.observe().estimates["s-0"].readings, 2);
    // An absurd value is refused.
    book.lease_readings(&table(3, 1.0e9), &limits(), t(5));
    let seen = book.observe();
    assert_eq!(seen.estimates["s-0"].readings, 2);
    assert_eq!(seen.rejected.by_reason.get("AbsurdLoad"), Some(&1));
}

#[test]
fn estimates_of_shards_gone_from_the_document_are_dropped() {
    let mut book = LoadBook::default();
    book.sync(Some(&doc(5)));
    book.report("a", &report(5, vec![rate("s-0", 1.0)]), &limits(), t(1))
        .unwrap();
    let mut smaller = doc(6);
    smaller.shards.remove("s-0");
    book.sync(Some(&smaller));
    assert!(book.observe().estimates.is_empty());
    // No document: every report is from the future.
    book.sync(None);
    assert!(matches!(
        book.report("a", &report(1, vec![]), &limits(), t(2)),
        Err(ReportRefusal::FutureEpoch { .. })
    ));
}
