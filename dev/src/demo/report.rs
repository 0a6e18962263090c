//! What the demo prints: move log lines (epoch, shard, from → to, why), the
//! per-pod table after each publish, and the checker's verdict with the
//! figures the issue asks for (overlaps, lost records, order and
//! children-before-parents violations, handoff gap p50/p99, moves per shard
//! over the rolling deploy).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use shardring_consumer::check::CheckReport;

use super::cluster::Cluster;
use super::partitioned::ledger::PartitionFigures;
use shardring_crds::{AssignmentDocument, ShardPhase};

/// One entry of the move log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveEvent {
    /// The epoch that published it.
    pub epoch: u64,
    /// The shard.
    pub shard: String,
    /// The pod it leaves (or that finished it).
    pub from: Option<String>,
    /// The pod it goes to.
    pub to: Option<String>,
    /// What happened.
    pub kind: MoveKind,
    /// The story's phase at the time.
    pub phase: &'static str,
}

/// What happened to a shard in one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveKind {
    /// Published `active` on a pod with no previous reader.
    Placed {
        /// Why it had no reader.
        reason: &'static str,
    },
    /// A new child waits for its parents to be read to their end.
    Pending,
    /// Revoked from its owner (phase one of a move).
    Revoked {
        /// Required or optional, and why.
        reason: &'static str,
    },
    /// Published `active` on its new owner (phase two).
    HandedOver {
        /// What showed the old owner let go.
        evidence: &'static str,
        /// Time since the revoke.
        after: Duration,
    },
    /// Read to its end (`SHARD_END`).
    Finished,
}

/// `shardId-000000000005` → `s5`, other ids unchanged.
pub fn short(shard: &str) -> String {
    shard
        .strip_prefix("shardId-")
        .and_then(|digits| digits.parse::<u64>().ok())
        .map_or_else(|| shard.to_owned(), |n| format!("s{n}"))
}

/// One move log line.
pub(crate) fn move_line(event: &MoveEvent) -> String {
    let pod = |p: &Option<String>| p.clone().unwrap_or_else(|| "-".to_owned());
    let what = match &event.kind {
        MoveKind::Placed { reason } => format!("placed ({reason})"),
        MoveKind::Pending => "pending until its parents are read to the end".to_owned(),
        MoveKind::Revoked { reason } => format!("revoked ({reason})"),
        MoveKind::HandedOver { evidence, after } => {
            format!("handed over after {} ms ({evidence})", after.as_millis())
        }
        MoveKind::Finished => "read to its end (SHARD_END)".to_owned(),
    };
    format!(
        "  epoch {:>3}  {:<4} {:>16} → {:<16} {what}",
        event.epoch,
        short(&event.shard),
        pod(&event.from),
        pod(&event.to),
    )
}

/// The per-pod table of a published document.
pub(crate) fn pod_table(doc: &AssignmentDocument, cluster: &Cluster) -> String {
    let mut out = String::new();
    let pending: Vec<String> = doc
        .shards
        .iter()
        .filter(|(_, r)| r.state == ShardPhase::Pending)
        .map(|(id, _)| short(id))
        .collect();
    let _ = writeln!(
        out,
        "  ┌ epoch {} ─ {} pods ─ {} shards{}",
        doc.epoch,
        cluster.pods.len(),
        doc.shards
            .values()
            .filter(|r| r.state != ShardPhase::Complete)
            .count(),
        if pending.is_empty() {
            String::new()
        } else {
            format!(" (pending: {})", pending.join(" "))
        }
    );
    for (name, pod) in &cluster.pods {
        let entry = doc.pods.get(name);
        let list = |shards: Option<&Vec<String>>| {
            shards
                .map(|s| s.iter().map(|id| short(id)).collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        };
        let state = if pod.record.deletion_timestamp.is_some() {
            "terminating"
        } else {
            "ready"
        };
        let revoking = list(entry.map(|e| &e.revoking));
        let _ = writeln!(
            out,
            "  │ {name:<16} {state:<11} active: {:<16}{}",
            list(entry.map(|e| &e.active)),
            if revoking.is_empty() {
                String::new()
            } else {
                format!(" revoking: {revoking}")
            }
        );
    }
    out.push_str("  └");
    out
}

/// The demo's result.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The checker's report over every record log.
    pub check: CheckReport,
    /// Completed handoffs per story phase.
    pub handoffs_by_phase: BTreeMap<&'static str, usize>,
    /// Readable shards during the rolling deploy.
    pub rolling_shards: usize,
    /// Consumers that died unexpectedly, and other problems.
    pub problems: Vec<String>,
    /// The static act's figures (`None`: it did not run).
    pub partitions: Option<PartitionFigures>,
    /// The hot act's figures (`None`: it did not run).
    pub hot: Option<super::partitioned::hot::HotFigures>,
    /// The RabbitMQ act's figures (`None`: it did not run, or no broker).
    pub rabbitmq: Option<super::queues::act::QueueFigures>,
    /// Wall time of the whole demo.
    pub elapsed: Duration,
}

impl Verdict {
    /// Whether the checker found nothing wrong, nothing else failed, and
    /// the static act (when it ran) kept every promise.
    pub fn passed(&self) -> bool {
        self.check.passed()
            && self.problems.is_empty()
            && self
                .partitions
                .as_ref()
                .is_none_or(PartitionFigures::passed)
            && self
                .hot
                .as_ref()
                .is_none_or(super::partitioned::hot::HotFigures::passed)
            && self
                .rabbitmq
                .as_ref()
                .is_none_or(super::queues::act::QueueFigures::passed)
    }

    /// Handoffs per shard during the rolling deploy.
    pub(crate) fn rolling_moves_per_shard(&self) -> f64 {
        let moves = self.handoffs_by_phase.get("rolling deploy").copied();
        moves.unwrap_or(0) as f64 / self.rolling_shards.max(1) as f64
    }

    /// The printed verdict.
    pub fn render(&self) -> String {
        let c = &self.check;
        let gap = |q| {
            c.gap_quantile(q)
                .map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()))
        };
        let mut out = String::new();
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        let _ = writeln!(out, "verdict: {verdict}");
        let _ = writeln!(out, "  records produced         {}", c.produced);
        let _ = writeln!(
            out,
            "  records processed        {} ({} processed twice, allowed: at least once)",
            c.processed, c.duplicates
        );
        let _ = writeln!(out, "  lost records             {}", c.lost.len());
        let _ = writeln!(
            out,
            "  overlaps                 {} (two pods reading one shard at once)",
            c.overlaps.len()
        );
        let _ = writeln!(
            out,
            "  order violations         {}",
            c.order_violations.len()
        );
        let _ = writeln!(
            out,
            "  children before parents  {}",
            c.parent_violations.len()
        );
        let _ = writeln!(
            out,
            "  handoff gap              p50 {}, p99 {} ({} handoffs seen in the logs)",
            gap(0.5),
            gap(0.99),
            c.handoff_gaps.len()
        );
        let _ = writeln!(
            out,
            "  rolling deploy           {:.2} moves per shard ({} handoffs over {} shards)",
            self.rolling_moves_per_shard(),
            self.handoffs_by_phase
                .get("rolling deploy")
                .copied()
                .unwrap_or(0),
            self.rolling_shards
        );
        let phases: Vec<String> = self
            .handoffs_by_phase
            .iter()
            .map(|(phase, n)| format!("{phase} {n}"))
            .collect();
        let _ = writeln!(out, "  handoffs by phase        {}", phases.join(", "));
        for problem in &self.problems {
            let _ = writeln!(out, "  problem: {problem}");
        }
        for overlap in c.overlaps.iter().take(5) {
            let _ = writeln!(
                out,
                "  overlap on {}: {:?} and {:?}",
                overlap.shard, overlap.first, overlap.second
            );
        }
        for lost in c.lost.iter().take(5) {
            let _ = writeln!(out, "  lost {} {}", lost.shard, lost.sequence_number);
        }
        if let Some(partitions) = &self.partitions {
            let _ = writeln!(out, "{}", partitions.render());
        }
        if let Some(hot) = &self.hot {
            let _ = writeln!(out, "{}", hot.render());
        }
        if let Some(rabbitmq) = &self.rabbitmq {
            let _ = writeln!(out, "{}", rabbitmq.render());
        }
        let _ = write!(out, "  took {:.1} s", self.elapsed.as_secs_f64());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_are_shortened() {
        assert_eq!(short("shardId-000000000012"), "s12");
        assert_eq!(short("queue-3"), "queue-3");
        let line = move_line(&MoveEvent {
            epoch: 4,
            shard: "shardId-000000000002".into(),
            from: Some("a".into()),
            to: Some("b".into()),
            kind: MoveKind::HandedOver {
                evidence: "lease_released",
                after: Duration::from_millis(420),
            },
            phase: "rolling deploy",
        });
        assert!(line.contains("s2"), "{line}");
        assert!(line.contains("after 420 ms (lease_released)"), "{line}");
    }

    #[test]
    fn rolling_moves_per_shard() {
        let verdict = Verdict {
            check: CheckReport::default(),
            handoffs_by_phase: BTreeMap::from([("rolling deploy", 6), ("scale up", 2)]),
            rolling_shards: 6,
            problems: Vec::new(),
            partitions: None,
            hot: None,
            rabbitmq: None,
            elapsed: Duration::from_secs(1),
        };
        assert!((verdict.rolling_moves_per_shard() - 1.0).abs() < 1e-9);
        assert!(verdict.passed());
        assert!(verdict.render().contains("verdict: PASS"));
    }
}
