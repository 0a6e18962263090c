//! The checker's verdict on queue logs ([`super::log`]): everything
//! [`crate::check`] proves of records (no two holds of a queue at once,
//! nothing produced lost, order within each hold, the handoff gaps), and
//! what a queue promises beyond it:
//!
//! - **order across owners**: per queue, messages are handled for the
//!   first time in the order they were produced, whoever handled them;
//! - **duplicates only where an acknowledgement was in flight**: a message
//!   handled again was first handled in a hold that did not end cleanly (a
//!   killed consumer, a lost connection: no broker confirmation of its
//!   acknowledgements) and among that hold's last `prefetch` messages (the
//!   most the broker had unacknowledged). A message of a hold that ended
//!   with the broker's confirmation is never handled again.
//!
//! It also sets apart the gaps of clean handoffs (the previous hold
//! released and confirmed): the handoff gap with release acknowledgements.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jiff::Timestamp;

use super::log::{HoldEnd, QueueLogLine};
use crate::check::{
    self, CheckError, CheckReport, OrderViolation, ProcessedRecord, ProducedRecord,
    compare_sequence, quantile,
};

/// A message handled again where the contract does not allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnexplainedDuplicate {
    /// The queue.
    pub queue: String,
    /// The message's sequence number.
    pub sequence: String,
    /// The hold that handled it first: pod and session.
    pub first: (String, u64),
    /// Why that hold's handling should have been final.
    pub why: &'static str,
}

/// The verdict on a run's queue logs.
#[derive(Debug, Clone, Default)]
pub struct QueueVerdict {
    /// What the record checker found (overlaps, losses, order within
    /// holds, gaps, moves, all duplicates).
    pub records: CheckReport,
    /// Messages handled for the first time out of their queue's order.
    pub order_across_owners: Vec<OrderViolation>,
    /// Duplicates of messages whose acknowledgement was in flight when
    /// their hold was lost.
    pub in_flight_duplicates: usize,
    /// Duplicates the contract does not allow.
    pub unexplained_duplicates: Vec<UnexplainedDuplicate>,
    /// Holds that ended cleanly (released, confirmed) and lost.
    pub clean_ends: usize,
    /// Holds lost (the consumer died or its connection dropped).
    pub lost_ends: usize,
    /// Gaps of handoffs whose previous hold ended cleanly: its last message
    /// to the next hold's first.
    pub clean_handoff_gaps: Vec<Duration>,
}

impl QueueVerdict {
    /// No overlap, nothing lost, order within holds and across owners, and
    /// only the duplicates the contract allows.
    pub fn passed(&self) -> bool {
        self.records.passed()
            && self.order_across_owners.is_empty()
            && self.unexplained_duplicates.is_empty()
    }

    /// The `q`-quantile of the clean handoffs' gaps.
    pub fn clean_gap_quantile(&self, q: f64) -> Option<Duration> {
        quantile(&self.clean_handoff_gaps, q)
    }

    /// A one-paragraph summary.
    pub fn summary(&self) -> String {
        let gap = |q| {
            self.clean_gap_quantile(q)
                .map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()))
        };
        format!(
            "{verdict}: produced {}, handled {}, lost {}, overlaps {}, order violations {} within holds and {} across owners, \
             duplicates {} ({} with an acknowledgement in flight at a lost hold, {} unexplained), holds ended {} cleanly and {} lost, \
             moves {} over {} queues, clean handoff gap p50 {} p99 {} ({} handoffs)",
            self.records.produced,
            self.records.processed,
            self.records.lost.len(),
            self.records.overlaps.len(),
            self.records.order_violations.len(),
            self.order_across_owners.len(),
            self.records.duplicates,
            self.in_flight_duplicates,
            self.unexplained_duplicates.len(),
            self.clean_ends,
            self.lost_ends,
            self.records.moves,
            self.records.shards,
            gap(0.5),
            gap(0.99),
            self.clean_handoff_gaps.len(),
            verdict = if self.passed() { "PASS" } else { "FAIL" },
        )
    }
}

/// Parses a queue log: records and hold ends, one JSON object a line.
pub fn parse(text: &str) -> Result<(Vec<ProcessedRecord>, Vec<HoldEnd>), CheckError> {
    let mut records = Vec::new();
    let mut ends = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line).map_err(|source| CheckError::Line {
            line: index + 1,
            source,
        })? {
            QueueLogLine::Record(record) => records.push(record),
            QueueLogLine::End(end) => ends.push(end),
        }
    }
    Ok((records, ends))
}

/// A hold of a queue: queue, pod, session.
type HoldKey<'a> = (&'a str, &'a str, u64);
/// A message: queue, sequence number.
type MessageKey<'a> = (&'a str, &'a str);

/// A queue log that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("queue log {path}: {detail}")]
pub struct LogError {
    /// The log.
    pub path: String,
    /// What is wrong.
    pub detail: String,
}

/// Every whole line of the queue logs at `paths`, records and hold ends
/// (a log not written yet is empty; a consumer killed mid-write may leave a
/// torn last line, whose message then counts as not handled).
pub fn read_logs(
    paths: &[std::path::PathBuf],
) -> Result<(Vec<ProcessedRecord>, Vec<HoldEnd>), LogError> {
    let (mut records, mut ends) = (Vec::new(), Vec::new());
    for path in paths {
        let fail = |detail: String| LogError {
            path: path.display().to_string(),
            detail,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(fail(error.to_string())),
        };
        let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
        let (mut more, mut ended) = parse(whole).map_err(|e| fail(e.to_string()))?;
        records.append(&mut more);
        ends.append(&mut ended);
    }
    Ok((records, ends))
}

/// One hold's records, in time order, and how it ended.
#[derive(Default)]
struct Hold<'a> {
    records: Vec<&'a ProcessedRecord>,
    clean: bool,
}

/// The verdict on `records` and `ends` (lines of several logs may be
/// concatenated) against `produced`, for consumers that had at most
/// `prefetch` messages unacknowledged per queue.
pub fn check(
    records: &[ProcessedRecord],
    ends: &[HoldEnd],
    produced: &[ProducedRecord],
    prefetch: usize,
) -> QueueVerdict {
    let mut verdict = QueueVerdict {
        records: check::check(records, produced, &BTreeMap::new()),
        ..QueueVerdict::default()
    };
    let mut lines: Vec<&ProcessedRecord> = records.iter().collect();
    lines.sort_by_key(|line| line.time);
    let mut holds: HashMap<HoldKey<'_>, Hold<'_>> = HashMap::new();
    for line in &lines {
        holds
            .entry((line.shard.as_str(), line.pod.as_str(), line.session))
            .or_default()
            .records
            .push(line);
    }
    let clean: BTreeSet<HoldKey<'_>> = ends
        .iter()
        .filter(|end| end.clean)
        .map(|end| (end.ended.as_str(), end.pod.as_str(), end.session))
        .collect();
    verdict.clean_ends = clean.len();
    verdict.lost_ends = ends.iter().filter(|end| !end.clean).count();
    for (key, hold) in &mut holds {
        hold.clean = clean.contains(key);
    }

    // First handlings per queue must follow the produced order; a repeat
    // must come from the in-flight tail of a lost hold.
    let mut first: HashMap<MessageKey<'_>, (HoldKey<'_>, usize)> = HashMap::new();
    let mut newest: HashMap<&str, &ProcessedRecord> = HashMap::new();
    let mut position: HashMap<HoldKey<'_>, usize> = HashMap::new();
    for line in &lines {
        let hold = (line.shard.as_str(), line.pod.as_str(), line.session);
        let index = position.entry(hold).or_default();
        let at = *index;
        *index += 1;
        let message = (line.shard.as_str(), line.sequence_number.as_str());
        if let Some((first_hold, first_at)) = first.get(&message) {
            let earlier = &holds[first_hold];
            let from_end = earlier.records.len() - first_at;
            let why = if *first_hold == hold {
                Some("handled twice in one hold")
            } else if earlier.clean {
                Some("its hold ended with the broker's confirmation of every acknowledgement")
            } else if from_end > prefetch {
                Some("it was not among the lost hold's last prefetch messages")
            } else {
                None
            };
            match why {
                None => verdict.in_flight_duplicates += 1,
                Some(why) => verdict.unexplained_duplicates.push(UnexplainedDuplicate {
                    queue: line.shard.clone(),
                    sequence: line.sequence_number.clone(),
                    first: (first_hold.1.to_owned(), first_hold.2),
                    why,
                }),
            }
            continue;
        }
        first.insert(message, (hold, at));
        if let Some(previous) = newest.get(line.shard.as_str())
            && compare_sequence(&line.sequence_number, &previous.sequence_number)
                != Ordering::Greater
        {
            verdict.order_across_owners.push(OrderViolation {
                shard: line.shard.clone(),
                pod: line.pod.clone(),
                previous: previous.sequence_number.clone(),
                next: line.sequence_number.clone(),
            });
            continue;
        }
        newest.insert(line.shard.as_str(), line);
    }

    // Gaps after clean ends: per queue, holds by their first record.
    let mut by_queue: BTreeMap<&str, Vec<(Timestamp, Timestamp, bool)>> = BTreeMap::new();
    for ((queue, _, _), hold) in &holds {
        if let (Some(start), Some(end)) = (hold.records.first(), hold.records.last()) {
            by_queue
                .entry(queue)
                .or_default()
                .push((start.time, end.time, hold.clean));
        }
    }
    for queue_holds in by_queue.values_mut() {
        queue_holds.sort_by_key(|(start, _, _)| *start);
        for pair in queue_holds.windows(2) {
            let ((_, end, clean), (start, _, _)) = (pair[0], pair[1]);
            if clean {
                let gap = start.duration_since(end);
                verdict
                    .clean_handoff_gaps
                    .push(Duration::try_from(gap).unwrap_or(Duration::ZERO));
            }
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn line(queue: &str, seq: u64, pod: &str, session: u64, ms: i64) -> ProcessedRecord {
        ProcessedRecord {
            shard: queue.into(),
            sequence_number: seq.to_string(),
            partition_key: queue.into(),
            pod: pod.into(),
            session,
            time: at(ms),
            data: String::new(),
        }
    }

    fn end(queue: &str, pod: &str, session: u64, clean: bool, ms: i64) -> HoldEnd {
        HoldEnd {
            ended: queue.into(),
            pod: pod.into(),
            session,
            clean,
            time: at(ms),
        }
    }

    fn produced(queue: &str, seqs: std::ops::RangeInclusive<u64>) -> Vec<ProducedRecord> {
        seqs.map(|s| ProducedRecord {
            shard: queue.into(),
            sequence_number: s.to_string(),
        })
        .collect()
    }

    #[test]
    fn a_clean_handoff_passes_with_no_duplicate_and_measures_its_gap() {
        let records = [
            line("q", 1, "a", 1, 0),
            line("q", 2, "a", 1, 10),
            line("q", 3, "b", 7, 40),
        ];
        let ends = [end("q", "a", 1, true, 20)];
        let verdict = check(&records, &ends, &produced("q", 1..=3), 5);
        assert!(verdict.passed(), "{}", verdict.summary());
        assert_eq!(verdict.clean_handoff_gaps, [Duration::from_millis(30)]);
        assert_eq!((verdict.clean_ends, verdict.lost_ends), (1, 0));
        assert!(verdict.summary().starts_with("PASS"));
    }

    #[test]
    fn a_lost_hold_may_repeat_its_in_flight_tail_only() {
        // a handled 1..=4 and died; b gets 3 and 4 again (within a prefetch
        // of 2), then 5.
        let mut records: Vec<_> = (1..=4_i64)
            .map(|s| line("q", s.unsigned_abs(), "a", 1, s))
            .collect();
        records.extend([
            line("q", 3, "b", 2, 50),
            line("q", 4, "b", 2, 51),
            line("q", 5, "b", 2, 52),
        ]);
        let ends = [end("q", "a", 1, false, 5)];
        let verdict = check(&records, &ends, &produced("q", 1..=5), 2);
        assert!(verdict.passed(), "{}", verdict.summary());
        assert_eq!(verdict.in_flight_duplicates, 2);
        assert_eq!(verdict.records.duplicates, 2);
        assert!(verdict.clean_handoff_gaps.is_empty(), "not a clean handoff");
        // A prefetch of 1 allows only the last one.
        let strict = check(&records, &ends, &produced("q", 1..=5), 1);
        assert!(!strict.passed());
        assert_eq!(strict.unexplained_duplicates.len(), 1);
        assert_eq!(strict.unexplained_duplicates[0].sequence, "3");
    }

    #[test]
    fn a_repeat_after_a_clean_end_and_reordering_fail() {
        let records = [
            line("q", 1, "a", 1, 0),
            line("q", 2, "a", 1, 1),
            line("q", 2, "b", 2, 10), // a's end was confirmed: 2 was acked
            line("q", 4, "b", 2, 11),
            line("q", 3, "b", 2, 12), // 3 first handled after 4
        ];
        let ends = [end("q", "a", 1, true, 5)];
        let verdict = check(&records, &ends, &produced("q", 1..=4), 10);
        assert!(!verdict.passed());
        assert_eq!(verdict.unexplained_duplicates.len(), 1);
        assert!(
            verdict.unexplained_duplicates[0]
                .why
                .contains("confirmation")
        );
        assert_eq!(verdict.order_across_owners.len(), 1);
        assert_eq!(
            (
                verdict.order_across_owners[0].previous.as_str(),
                verdict.order_across_owners[0].next.as_str()
            ),
            ("4", "3")
        );
        assert!(verdict.summary().starts_with("FAIL"));
    }

    #[test]
    fn logs_parse_records_and_ends() {
        let text = format!(
            "{}\n{}\n\n",
            serde_json::to_string(&QueueLogLine::Record(line("q", 1, "a", 1, 0))).unwrap(),
            serde_json::to_string(&QueueLogLine::End(end("q", "a", 1, true, 1))).unwrap()
        );
        let (records, ends) = parse(&text).unwrap();
        assert_eq!((records.len(), ends.len()), (1, 1));
        assert!(ends[0].clean);
        assert!(matches!(
            parse("{nope"),
            Err(CheckError::Line { line: 1, .. })
        ));
    }
}
