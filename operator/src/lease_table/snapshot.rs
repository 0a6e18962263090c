//! Per-shard lease snapshots ([`LeaseTable`], a type of the controller
//! core), built purely: from the scanned lease records, the previous
//! snapshot and an injected `now`, work out each lease's owner, counter,
//! when that counter last changed (a counter unchanged for the lease failover
//! time means the owner stopped renewing: the lease has expired), whether
//! the shard is complete (checkpoint `SHARD_END`), and the throughput a KCL
//! 3.x worker measured (`throughputKBps`, written with every renewal).

use std::collections::BTreeMap;

use jiff::Timestamp;
pub use shardring_core::leases::{LeaseSnapshot, LeaseTable};

use super::record::{CheckpointKind, LeaseRecord};

/// Builds the next table from scanned records and the previous table.
/// `stream` keeps only leases for that stream (multi-stream keys naming
/// another stream are dropped; plain keys are kept).
pub(crate) fn build(
    records: &[LeaseRecord],
    items: usize,
    stream: Option<&str>,
    previous: Option<&LeaseTable>,
    now: Timestamp,
) -> LeaseTable {
    let mut leases = BTreeMap::new();
    for record in records
        .iter()
        .filter(|record| stream.is_none_or(|name| record.is_for_stream(name)))
    {
        let counter = record.lease_counter.unwrap_or(0);
        let unchanged = previous
            .and_then(|table| table.get(&record.shard_id))
            .filter(|before| before.counter == counter && before.owner == record.lease_owner);
        let checkpoint = record.checkpoint.as_ref().map(|c| c.kind());
        let snapshot = LeaseSnapshot {
            shard_id: record.shard_id.clone(),
            owner: record.lease_owner.clone(),
            counter,
            counter_changed_at: unchanged.map_or(now, |before| before.counter_changed_at),
            checkpoint,
            sequence_number: match &record.checkpoint {
                Some(super::record::Checkpoint::Sequence(number)) => Some(number.clone()),
                _ => None,
            },
            complete: checkpoint == Some(CheckpointKind::ShardEnd),
            parents: record.parent_shard_ids.clone(),
            children: record.child_shard_ids.clone(),
            checkpoint_owner: record.checkpoint_owner.clone(),
            throughput_kbps: record.throughput_kbps,
        };
        leases.insert(record.shard_id.clone(), snapshot);
    }
    LeaseTable {
        leases,
        scanned_at: Some(now),
        items,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::record::Checkpoint;
    use super::*;

    fn record(shard: &str, owner: Option<&str>, counter: u64, checkpoint: &str) -> LeaseRecord {
        LeaseRecord {
            lease_owner: owner.map(str::to_owned),
            lease_counter: Some(counter),
            checkpoint: Checkpoint::parse(checkpoint),
            ..LeaseRecord::new(shard)
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("valid")
    }

    #[test]
    fn counter_change_time_follows_renewals() {
        let first = build(
            &[record("s0", Some("a"), 1, "LATEST")],
            1,
            None,
            None,
            at(0),
        );
        assert_eq!(first.get("s0").map(|l| l.counter_changed_at), Some(at(0)));
        // Same counter 10 s later: the change time stays at the first sighting.
        let second = build(
            &[record("s0", Some("a"), 1, "LATEST")],
            1,
            None,
            Some(&first),
            at(10),
        );
        assert_eq!(second.get("s0").map(|l| l.counter_changed_at), Some(at(0)));
        assert!(
            second
                .get("s0")
                .is_some_and(|l| l.is_expired(at(10), Duration::from_secs(10)))
        );
        assert!(
            !second
                .get("s0")
                .is_some_and(|l| l.is_expired(at(10), Duration::from_secs(11)))
        );
        // A renewal moves it.
        let third = build(
            &[record("s0", Some("a"), 2, "LATEST")],
            1,
            None,
            Some(&second),
            at(20),
        );
        assert_eq!(third.get("s0").map(|l| l.counter_changed_at), Some(at(20)));
        // So does an owner change at the same counter.
        let fourth = build(
            &[record("s0", Some("b"), 2, "LATEST")],
            1,
            None,
            Some(&third),
            at(30),
        );
        assert_eq!(fourth.get("s0").map(|l| l.counter_changed_at), Some(at(30)));
    }

    #[test]
    fn a_kcl_3_throughput_reading_is_carried() {
        let mut renewed = record("s0", Some("worker-1"), 7, "12345");
        renewed.throughput_kbps = Some(512.25);
        let table = build(&[renewed], 1, None, None, at(0));
        assert_eq!(
            table.get("s0").and_then(|l| l.throughput_kbps),
            Some(512.25)
        );
    }

    #[test]
    fn shard_end_is_complete_and_other_streams_are_dropped() {
        let mut other = record("s9", Some("x"), 1, "SHARD_END");
        other.stream = Some(super::super::record::StreamQualifier {
            account: "1".into(),
            stream: "other".into(),
            creation_epoch: "1".into(),
        });
        let table = build(
            &[
                record("s0", None, 4, "SHARD_END"),
                record("s1", Some("a"), 1, "12345"),
                other,
            ],
            3,
            Some("orders"),
            None,
            at(0),
        );
        assert_eq!(table.leases.len(), 2);
        assert!(
            table
                .get("s0")
                .is_some_and(|l| l.complete && l.owner.is_none())
        );
        let s1 = table.get("s1").expect("present");
        assert!(!s1.complete);
        assert_eq!(s1.throughput_kbps, None);
        assert_eq!(s1.checkpoint, Some(CheckpointKind::Sequence));
        assert_eq!(s1.sequence_number.as_deref(), Some("12345"));
        assert_eq!(table.items, 3);
    }
}
