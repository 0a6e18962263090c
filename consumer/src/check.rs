//! A pure checker of what consumers processed against what was produced.
//! Consumers (the reference consumer) append one JSON line per processed
//! record ([`ProcessedRecord`]); given those lines and the produced records
//! it proves, or refutes:
//!
//! - **no overlap**: no two holds (pod + lease session) of one shard
//!   processed records in overlapping time intervals;
//! - **no loss**: every produced record was processed at least once;
//! - **order**: within one hold, sequence numbers strictly increase;
//! - **children after parents**: no record of a child shard was processed
//!   before the last record of each of its parents;
//!
//! and measures handoff gaps (end of one hold to the start of the next on
//! the same shard) and moves per shard. Time intervals are those of the
//! records seen: an idle hold leaves no trace.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A line is not a processed-record JSON object.
    #[error("log line {line}: {source}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// The JSON error.
        source: serde_json::Error,
    },
}

/// One processed record, as a log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessedRecord {
    /// Shard id.
    pub shard: String,
    /// Sequence number.
    pub sequence_number: String,
    /// Partition key.
    pub partition_key: String,
    /// Pod (worker id) that processed it.
    pub pod: String,
    /// The lease counter when the pod took the shard: identifies the hold.
    pub session: u64,
    /// When it was processed.
    pub time: Timestamp,
    /// The payload (UTF-8, lossy).
    #[serde(default)]
    pub data: String,
}

/// One produced record (what PutRecord returned).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProducedRecord {
    /// Shard id.
    pub shard: String,
    /// Sequence number.
    pub sequence_number: String,
}

/// Two holds of one shard that processed records at the same time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The shard.
    pub shard: String,
    /// The earlier hold: pod and session.
    pub first: (String, u64),
    /// The later hold.
    pub second: (String, u64),
}

/// A sequence number that did not increase within one hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderViolation {
    /// The shard.
    pub shard: String,
    /// The pod.
    pub pod: String,
    /// The record before.
    pub previous: String,
    /// The record that did not follow it.
    pub next: String,
}

/// The verdict.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckReport {
    /// Records produced.
    pub produced: usize,
    /// Log lines (records processed, with repeats).
    pub processed: usize,
    /// Records processed more than once (allowed: at least once).
    pub duplicates: usize,
    /// Produced records never processed.
    pub lost: Vec<ProducedRecord>,
    /// Holds that overlapped in time.
    pub overlaps: Vec<Overlap>,
    /// Order violations within holds.
    pub order_violations: Vec<OrderViolation>,
    /// `(child, parent)` pairs where the child was read before the parent finished.
    pub parent_violations: Vec<(String, String)>,
    /// Every handoff gap (end of one hold to the start of the next).
    pub handoff_gaps: Vec<Duration>,
    /// Shards seen.
    pub shards: usize,
    /// Handoffs (consecutive holds of a shard by different holds).
    pub moves: usize,
}

impl CheckReport {
    /// No overlap, no loss, order held, children after parents.
    pub fn passed(&self) -> bool {
        self.lost.is_empty()
            && self.overlaps.is_empty()
            && self.order_violations.is_empty()
            && self.parent_violations.is_empty()
    }

    /// The `q`-quantile (0..=1, nearest rank) of the handoff gaps.
    pub fn gap_quantile(&self, q: f64) -> Option<Duration> {
        quantile(&self.handoff_gaps, q)
    }

    /// Moves per shard seen.
    pub fn moves_per_shard(&self) -> f64 {
        if self.shards == 0 {
            0.0
        } else {
            self.moves as f64 / self.shards as f64
        }
    }

    /// A one-paragraph human summary.
    pub fn summary(&self) -> String {
        let gap = |q| {
            self.gap_quantile(q)
                .map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()))
        };
        format!(
            "{verdict}: produced {}, processed {} ({} duplicates), lost {}, overlaps {}, order violations {}, \
             parent violations {}, moves {} over {} shards ({:.2}/shard), handoff gap p50 {} p99 {}",
            self.produced,
            self.processed,
            self.duplicates,
            self.lost.len(),
            self.overlaps.len(),
            self.order_violations.len(),
            self.parent_violations.len(),
            self.moves,
            self.shards,
            self.moves_per_shard(),
            gap(0.5),
            gap(0.99),
            verdict = if self.passed() { "PASS" } else { "FAIL" },
        )
    }
}

/// Compares two decimal sequence numbers (up to 56 digits, no leading zeros).
pub fn compare_sequence(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Parses a log: one [`ProcessedRecord`] JSON object per non-empty line.
pub fn parse_log(text: &str) -> Result<Vec<ProcessedRecord>, CheckError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|source| CheckError::Line {
                line: index + 1,
                source,
            })
        })
        .collect()
}

struct Hold {
    pod: String,
    session: u64,
    start: Timestamp,
    end: Timestamp,
}

/// Checks `processed` (in log order; lines of several logs may be
/// concatenated) against `produced`; `parents` maps child shards to their
/// parents (empty when the stream was never resharded).
pub fn check(
    processed: &[ProcessedRecord],
    produced: &[ProducedRecord],
    parents: &BTreeMap<String, Vec<String>>,
) -> CheckReport {
    let mut report = CheckReport {
        produced: produced.len(),
        processed: processed.len(),
        ..CheckReport::default()
    };
    // Stable sort by time keeps each writer's own order for equal stamps.
    let mut lines: Vec<&ProcessedRecord> = processed.iter().collect();
    lines.sort_by_key(|line| line.time);

    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    for line in &lines {
        if !seen.insert((&line.shard, &line.sequence_number)) {
            report.duplicates += 1;
        }
    }
    report.lost = produced
        .iter()
        .filter(|p| !seen.contains(&(p.shard.as_str(), p.sequence_number.as_str())))
        .cloned()
        .collect();
    report.lost.sort();

    // Per shard: holds (time intervals) and the order within each.
    let mut holds: BTreeMap<&str, Vec<Hold>> = BTreeMap::new();
    let mut last_in_hold: BTreeMap<(&str, &str, u64), &str> = BTreeMap::new();
    for line in &lines {
        let key = (line.shard.as_str(), line.pod.as_str(), line.session);
        if let Some(previous) = last_in_hold.insert(key, &line.sequence_number)
            && compare_sequence(previous, &line.sequence_number) != Ordering::Less
        {
            report.order_violations.push(OrderViolation {
                shard: line.shard.clone(),
                pod: line.pod.clone(),
                previous: previous.to_owned(),
                next: line.sequence_number.clone(),
            });
        }
        let shard_holds = holds.entry(&line.shard).or_default();
        match shard_holds
            .iter_mut()
            .find(|h| h.pod == line.pod && h.session == line.session)
        {
            Some(hold) => hold.end = line.time,
            None => shard_holds.push(Hold {
                pod: line.pod.clone(),
                session: line.session,
                start: line.time,
                end: line.time,
            }),
        }
    }
    report.shards = holds.len();
    let mut first_time: BTreeMap<&str, Timestamp> = BTreeMap::new();
    let mut last_time: BTreeMap<&str, Timestamp> = BTreeMap::new();
    for (shard, shard_holds) in &mut holds {
        shard_holds.sort_by_key(|h| h.start);
        if let (Some(first), Some(last)) =
            (shard_holds.first(), shard_holds.iter().map(|h| h.end).max())
        {
            first_time.insert(shard, first.start);
            last_time.insert(shard, last);
        }
        // Sweep: any hold starting before the latest end so far overlaps it.
        let mut latest: Option<&Hold> = None;
        for (index, hold) in shard_holds.iter().enumerate() {
            if let Some(previous) = latest
                && hold.start <= previous.end
            {
                report.overlaps.push(Overlap {
                    shard: (*shard).to_owned(),
                    first: (previous.pod.clone(), previous.session),
                    second: (hold.pod.clone(), hold.session),
                });
            }
            if index > 0 {
                report.moves += 1;
                let previous = &shard_holds[index - 1];
                let gap = hold.start.duration_since(previous.end);
                report
                    .handoff_gaps
                    .push(Duration::try_from(gap).unwrap_or(Duration::ZERO));
            }
            if latest.is_none_or(|l| hold.end > l.end) {
                latest = Some(hold);
            }
        }
    }
    let mut violations = BTreeSet::new();
    for (child, child_parents) in parents {
        let Some(child_start) = first_time.get(child.as_str()) else {
            continue;
        };
        for parent in child_parents {
            if last_time
                .get(parent.as_str())
                .is_some_and(|parent_end| child_start < parent_end)
            {
                violations.insert((child.clone(), parent.clone()));
            }
        }
    }
    report.parent_violations = violations.into_iter().collect();
    report
}

/// The `q`-quantile (0..=1, nearest rank) of `durations`, in any order
/// (`None` when empty): the rule every handoff-gap figure uses.
pub fn quantile(durations: &[Duration], q: f64) -> Option<Duration> {
    let mut sorted = durations.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return None;
    }
    // In 0..=len by the clamp (and a float-to-int cast saturates anyway).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize).max(1);
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn line(shard: &str, seq: u64, pod: &str, session: u64, ms: i64) -> ProcessedRecord {
        ProcessedRecord {
            shard: shard.into(),
            sequence_number: seq.to_string(),
            partition_key: format!("k{seq}"),
            pod: pod.into(),
            session,
            time: at(ms),
            data: String::new(),
        }
    }

    fn produced(shard: &str, seqs: std::ops::RangeInclusive<u64>) -> Vec<ProducedRecord> {
        seqs.map(|s| ProducedRecord {
            shard: shard.into(),
            sequence_number: s.to_string(),
        })
        .collect()
    }

    #[test]
    fn a_clean_handoff_passes_and_measures_the_gap() {
        let log = vec![
            line("s1", 10, "a", 1, 0),
            line("s1", 11, "a", 1, 10),
            line("s1", 11, "b", 4, 60), // reprocessed from the checkpoint
            line("s1", 12, "b", 4, 70),
            line("s2", 10, "b", 1, 5),
        ];
        let mut all = produced("s1", 10..=12);
        all.extend(produced("s2", 10..=10));
        let report = check(&log, &all, &BTreeMap::new());
        assert!(report.passed(), "{}", report.summary());
        assert_eq!(report.duplicates, 1);
        assert_eq!(report.moves, 1);
        assert_eq!(report.shards, 2);
        assert_eq!(report.handoff_gaps, vec![Duration::from_millis(50)]);
        assert_eq!(report.gap_quantile(0.99), Some(Duration::from_millis(50)));
        assert!((report.moves_per_shard() - 0.5).abs() < 1e-9);
        assert!(report.summary().starts_with("PASS"));
    }

    #[test]
    fn finds_overlaps_losses_and_order_violations() {
        let log = vec![
            line("s1", 10, "a", 1, 0),
            line("s1", 11, "b", 2, 5), // b starts while a still reads
            line("s1", 12, "a", 1, 10),
            line("s1", 12, "b", 2, 15),
            line("s1", 11, "b", 2, 20), // goes backwards within b's hold
        ];
        let report = check(&log, &produced("s1", 10..=14), &BTreeMap::new());
        assert!(!report.passed());
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps[0].first, ("a".into(), 1));
        assert_eq!(report.overlaps[0].second, ("b".into(), 2));
        assert_eq!(
            report
                .lost
                .iter()
                .map(|r| r.sequence_number.as_str())
                .collect::<Vec<_>>(),
            vec!["13", "14"]
        );
        assert_eq!(report.order_violations.len(), 1);
        assert_eq!(report.order_violations[0].previous, "12");
        assert_eq!(report.order_violations[0].next, "11");
        assert!(report.summary().starts_with("FAIL"));
    }

    #[test]
    fn the_same_pod_taking_a_shard_back_is_a_new_hold() {
        let log = vec![
            line("s1", 10, "a", 1, 0),
            line("s1", 11, "b", 3, 10),
            line("s1", 11, "a", 5, 20), // a again, from b's checkpoint
        ];
        let report = check(&log, &produced("s1", 10..=11), &BTreeMap::new());
        assert!(report.passed(), "{}", report.summary());
        assert_eq!(report.moves, 2);
    }

    #[test]
    fn children_must_start_after_their_parents_end() {
        let parents = BTreeMap::from([("c1".to_owned(), vec!["p".to_owned()])]);
        let ok = vec![line("p", 1, "a", 1, 0), line("c1", 2, "b", 1, 10)];
        assert!(check(&ok, &[], &parents).passed());
        let early = vec![
            line("p", 1, "a", 1, 0),
            line("c1", 2, "b", 1, 5),
            line("p", 3, "a", 1, 10),
        ];
        let report = check(&early, &[], &parents);
        assert_eq!(report.parent_violations, vec![("c1".into(), "p".into())]);
    }

    #[test]
    fn compares_long_sequence_numbers_numerically_and_parses_logs() {
        let long = "49590338271490256608559692538361571095921575989136588898";
        assert_eq!(compare_sequence("9", "10"), Ordering::Less);
        assert_eq!(compare_sequence(long, "10"), Ordering::Greater);
        let text = format!(
            "{}\n\n{}\n",
            serde_json::to_string(&line("s1", 1, "a", 1, 0)).unwrap(),
            serde_json::to_string(&line("s1", 2, "a", 1, 1)).unwrap()
        );
        let parsed = parse_log(&text).unwrap();
        assert_eq!(parsed.len(), 2);
        assert!(parsed[0].time < parsed[1].time);
        assert!(text.contains("\"sequenceNumber\":\"1\""));
        assert!(matches!(
            parse_log("{bad"),
            Err(CheckError::Line { line: 1, .. })
        ));
    }
}
