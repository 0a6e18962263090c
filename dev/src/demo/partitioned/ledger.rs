//! What the static act's consumers did, and what it proves: every hold of
//! a partition by a pod (reader opened, first read, closed) and every
//! message processed, in the order processed. From them the
//! [`PartitionFigures`]: each partition's messages processed exactly once
//! and in order across owners, no two pods holding a partition at once,
//! and the handoff gap (old owner's stop → new owner's first read).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use shardring_consumer::check::quantile;

/// One pod's hold of one partition.
#[derive(Debug, Clone)]
struct Hold {
    pod: String,
    opened: Instant,
    first_read: Option<Instant>,
    closed: Option<Instant>,
}

#[derive(Debug, Default)]
struct Inner {
    holds: BTreeMap<String, Vec<Hold>>,
    processed: BTreeMap<String, Vec<u64>>,
}

/// The consumers' shared record.
#[derive(Debug, Default)]
pub struct Ledger {
    inner: Mutex<Inner>,
}

impl Ledger {
    fn inner(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// `pod` opened a reader of `partition`.
    pub fn opened(&self, pod: &str, partition: &str) {
        self.inner()
            .holds
            .entry(partition.to_owned())
            .or_default()
            .push(Hold {
                pod: pod.to_owned(),
                opened: Instant::now(),
                first_read: None,
                closed: None,
            });
    }

    /// `pod` reads `partition` (its first read of the hold is the end of a
    /// handoff gap).
    pub fn reading(&self, pod: &str, partition: &str) {
        let now = Instant::now();
        self.with_open_hold(pod, partition, |hold| {
            hold.first_read.get_or_insert(now);
        });
    }

    /// `pod` processed `messages` of `partition`, in order.
    pub fn processed(&self, partition: &str, messages: std::ops::Range<u64>) {
        self.inner()
            .processed
            .entry(partition.to_owned())
            .or_default()
            .extend(messages);
    }

    /// `pod`'s reader of `partition` stopped after its last batch.
    pub fn closed(&self, pod: &str, partition: &str) {
        let now = Instant::now();
        self.with_open_hold(pod, partition, |hold| hold.closed = Some(now));
    }

    /// Updates `pod`'s open hold of `partition`, if any.
    fn with_open_hold(&self, pod: &str, partition: &str, update: impl FnOnce(&mut Hold)) {
        let mut inner = self.inner();
        let open = inner.holds.get_mut(partition).and_then(|holds| {
            holds
                .iter_mut()
                .rev()
                .find(|h| h.pod == pod && h.closed.is_none())
        });
        if let Some(hold) = open {
            update(hold);
        }
    }

    /// Whether `pod` holds `partition` now and has read it.
    pub fn is_reading(&self, pod: &str, partition: &str) -> bool {
        self.inner().holds.get(partition).is_some_and(|holds| {
            holds
                .iter()
                .any(|h| h.pod == pod && h.closed.is_none() && h.first_read.is_some())
        })
    }

    /// Whether the last message processed of every partition is the
    /// last of `produced` (repeats or gaps before it are for the tally).
    pub fn caught_up(&self, produced: &BTreeMap<String, u64>) -> bool {
        let inner = self.inner();
        produced.iter().all(|(partition, &count)| {
            let last = inner.processed.get(partition).and_then(|m| m.last());
            count == 0 || last == Some(&(count - 1))
        })
    }

    /// The figures against `produced` messages per partition.
    pub fn figures(&self, produced: &BTreeMap<String, u64>) -> Tally {
        let inner = self.inner();
        let mut tally = Tally {
            partitions: produced.len(),
            ..Tally::default()
        };
        for (partition, &count) in produced {
            tally.produced += count;
            let done = inner
                .processed
                .get(partition)
                .map_or(&[][..], Vec::as_slice);
            tally.processed += done.len() as u64;
            let mut seen = vec![false; usize::try_from(count).unwrap_or(0)];
            for (i, &message) in done.iter().enumerate() {
                // In order: each message follows the one before, whoever
                // processed either.
                let expected = if i == 0 { 0 } else { done[i - 1] + 1 };
                if message != expected {
                    tally.order_violations += 1;
                }
                match seen.get_mut(usize::try_from(message).unwrap_or(usize::MAX)) {
                    Some(flag) if *flag => tally.duplicates += 1,
                    Some(flag) => *flag = true,
                    None => tally.duplicates += 1,
                }
            }
            tally.missing += seen.iter().filter(|s| !**s).count() as u64;
        }
        for holds in inner.holds.values() {
            let mut holds = holds.clone();
            holds.sort_by_key(|h| h.opened);
            for (i, a) in holds.iter().enumerate() {
                for b in &holds[i + 1..] {
                    let a_end = a
                        .closed
                        .unwrap_or(Instant::now() + Duration::from_secs(3600));
                    if a.pod != b.pod && b.opened < a_end {
                        tally.overlaps += 1;
                    }
                }
            }
            for pair in holds.windows(2) {
                if let (Some(stopped), Some(read)) = (pair[0].closed, pair[1].first_read) {
                    tally.gaps.push(read.saturating_duration_since(stopped));
                }
            }
        }
        tally.gaps.sort();
        tally
    }
}

/// What the ledger shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Partitions of the group.
    pub partitions: usize,
    /// Messages the producer wrote.
    pub produced: u64,
    /// Messages processed (repeats included).
    pub processed: u64,
    /// Messages processed more than once.
    pub duplicates: u64,
    /// Messages never processed.
    pub missing: u64,
    /// Messages not processed right after the one before in their partition.
    pub order_violations: u64,
    /// Pairs of holds of one partition by two pods at the same time.
    pub overlaps: usize,
    /// Handoff gaps (old owner's stop → new owner's first read), sorted.
    pub gaps: Vec<Duration>,
}

impl Tally {
    /// The `q` quantile of the handoff gaps (the consumer checker's rule).
    pub fn gap_quantile(&self, q: f64) -> Option<Duration> {
        quantile(&self.gaps, q)
    }
}

/// The static act's result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionFigures {
    /// What the ledger shows.
    pub tally: Tally,
    /// The group's `handoff.drainTimeout`: the gap every handoff waited
    /// before release acknowledgements.
    pub drain_timeout: Duration,
    /// Completed handoffs by evidence.
    pub evidence: BTreeMap<&'static str, usize>,
    /// Handoffs during the rolling deploy, and partitions then (`None`:
    /// the act had no rolling deploy).
    pub rolling: Option<(usize, usize)>,
    /// Consumers that ended unasked, and other problems.
    pub problems: Vec<String>,
    /// Wall time of the act.
    pub elapsed: Duration,
}

impl PartitionFigures {
    /// Handoffs completed on a release acknowledgement.
    pub fn acked(&self) -> usize {
        self.evidence.get("release_acked").copied().unwrap_or(0)
    }

    /// Whether every promise held: exactly once, in order, no overlap,
    /// every handoff gap (p99) under the drain timeout.
    pub fn passed(&self) -> bool {
        let t = &self.tally;
        t.produced > 0
            && t.duplicates == 0
            && t.missing == 0
            && t.order_violations == 0
            && t.overlaps == 0
            && self
                .tally
                .gap_quantile(0.99)
                .is_some_and(|p99| p99 < self.drain_timeout)
            && self.problems.is_empty()
    }

    /// The verdict's lines of the static act.
    pub fn render(&self) -> String {
        let t = &self.tally;
        let ms =
            |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()));
        let handoffs: usize = self.evidence.values().sum();
        let evidence: Vec<String> = self
            .evidence
            .iter()
            .map(|(label, n)| format!("{label} {n}"))
            .collect();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "  static act               {} partitions, {} messages produced, {} processed",
            t.partitions, t.produced, t.processed
        );
        let _ = writeln!(
            out,
            "  exactly once             {} duplicates, {} missing",
            t.duplicates, t.missing
        );
        let _ = writeln!(
            out,
            "  in order across owners   {} violations",
            t.order_violations
        );
        let _ = writeln!(
            out,
            "  overlaps                 {} (two pods holding one partition at once)",
            t.overlaps
        );
        let _ = writeln!(
            out,
            "  handoff gap with acks    p50 {}, p99 {} ({} handoffs; drainTimeout {} ms without acks)",
            ms(t.gap_quantile(0.5)),
            ms(t.gap_quantile(0.99)),
            t.gaps.len(),
            self.drain_timeout.as_millis()
        );
        let _ = writeln!(
            out,
            "  handoffs by evidence     {} of {handoffs} release_acked ({})",
            self.acked(),
            evidence.join(", ")
        );
        if let Some((handoffs, partitions)) = self.rolling {
            let _ = writeln!(
                out,
                "  rolling deploy           {:.2} moves per partition ({handoffs} handoffs over {partitions} partitions)",
                handoffs as f64 / partitions.max(1) as f64,
            );
        }
        for problem in &self.problems {
            let _ = writeln!(out, "  problem: {problem}");
        }
        let _ = write!(out, "  static act took {:.1} s", self.elapsed.as_secs_f64());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_handover_counts_once_in_order_with_its_gap() {
        let ledger = Ledger::default();
        ledger.opened("a", "q-0");
        ledger.reading("a", "q-0");
        ledger.processed("q-0", 0..3);
        ledger.closed("a", "q-0");
        ledger.opened("b", "q-0");
        ledger.reading("b", "q-0");
        ledger.processed("q-0", 3..5);
        assert!(ledger.is_reading("b", "q-0"));
        let produced = BTreeMap::from([("q-0".to_owned(), 5)]);
        assert!(ledger.caught_up(&produced));
        assert!(!ledger.caught_up(&BTreeMap::from([("q-0".to_owned(), 6)])));
        assert!(!ledger.is_reading("a", "q-0"));
        let tally = ledger.figures(&produced);
        assert_eq!(
            (
                tally.duplicates,
                tally.missing,
                tally.order_violations,
                tally.overlaps
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(tally.gaps.len(), 1);
        assert!(tally.gap_quantile(0.99).unwrap() < Duration::from_secs(1));
    }

    #[test]
    fn restarts_repeats_and_overlaps_are_caught() {
        let ledger = Ledger::default();
        ledger.opened("a", "q-0");
        ledger.processed("q-0", 0..3);
        // b opens before a closed, and starts over from the head.
        ledger.opened("b", "q-0");
        ledger.processed("q-0", 0..2);
        ledger.closed("a", "q-0");
        let tally = ledger.figures(&BTreeMap::from([("q-0".to_owned(), 4)]));
        assert_eq!(tally.overlaps, 1);
        assert_eq!(tally.duplicates, 2);
        assert_eq!(tally.missing, 1, "message 3 never processed");
        assert_eq!(tally.order_violations, 1, "0 after 2");
        let figures = PartitionFigures {
            tally,
            drain_timeout: Duration::from_secs(10),
            ..PartitionFigures::default()
        };
        assert!(!figures.passed());
        assert!(figures.render().contains("1 (two pods holding"));
    }

    #[test]
    fn a_rolling_deploy_is_reported_only_for_an_act_that_ran_one() {
        let without = PartitionFigures::default();
        assert!(!without.render().contains("rolling deploy"));
        let with = PartitionFigures {
            rolling: Some((24, 24)),
            ..PartitionFigures::default()
        };
        assert!(with.render().contains(
            "rolling deploy           1.00 moves per partition (24 handoffs over 24 partitions)"
        ));
    }
}
