//! The end of a RabbitMQ scenario: stop the producer, wait (with a
//! deadline) until every message the broker confirmed shows up in some
//! consumer's queue log, make sure the final assignment is settled, and
//! run the queue checker (`shardring_consumer::rabbitmq::verdict`): no
//! overlapping holds, nothing lost, order per queue within holds and across
//! owners, duplicates only of messages whose acknowledgement was in flight
//! when a hold was lost, printing the duplicates and the clean handoffs'
//! gaps.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;

use shardring_consumer::check::ProcessedRecord;
use shardring_consumer::rabbitmq::log::HoldEnd;
use shardring_consumer::rabbitmq::verdict::{self, QueueVerdict};
use shardring_devkit::wait::{Probe, wait_for};

use super::{PREFETCH, QueueHarness};
use crate::harness::{HarnessError, STEP_TIMEOUT};
use crate::verdict::VerdictError;

/// Every whole line of the queue logs at `paths` (see
/// `shardring_consumer::rabbitmq::verdict::read_logs`).
pub fn read_logs(paths: &[PathBuf]) -> Result<(Vec<ProcessedRecord>, Vec<HoldEnd>), HarnessError> {
    verdict::read_logs(paths).map_err(|e| HarnessError::Log {
        path: e.path,
        detail: e.detail,
    })
}

/// Finishes `scenario` (see the module docs); the verdict when it passed.
pub async fn finish(
    harness: &mut QueueHarness,
    scenario: &str,
) -> Result<QueueVerdict, VerdictError> {
    let produced = harness.stop_producer().await;
    let wanted: HashSet<(&str, &str)> = produced
        .iter()
        .map(|p| (p.shard.as_str(), p.sequence_number.as_str()))
        .collect();
    let logs = harness.pods.logs().to_vec();
    let all_handled = wait_for(
        "every confirmed message to be handled",
        STEP_TIMEOUT,
        || {
            let missing = read_logs(&logs).map(|(records, _)| {
                let seen: HashSet<(&str, &str)> = records
                    .iter()
                    .map(|r| (r.shard.as_str(), r.sequence_number.as_str()))
                    .collect();
                wanted.iter().filter(|m| !seen.contains(*m)).count()
            });
            let total = wanted.len();
            async move {
                Ok::<_, HarnessError>(match missing? {
                    0 => Probe::Done(()),
                    n => Probe::Pending(format!("{n} of {total} messages not handled")),
                })
            }
        },
    )
    .await;
    if let Err(error) = all_handled {
        // Not fatal here: the checker lists exactly what was lost.
        eprintln!("e2e[{scenario}]: {error}");
    }
    harness.wait_settled(&format!("{scenario} end")).await?;
    let (records, ends) = read_logs(&logs)?;
    let verdict = verdict::check(&records, &ends, &produced, usize::from(PREFETCH));
    // Straight to stderr, so a CI log shows the verdict of a passing test.
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "e2e[{scenario}]: {}", verdict.summary());
    let mut gaps: Vec<u128> = verdict
        .clean_handoff_gaps
        .iter()
        .map(|g| g.as_millis())
        .collect();
    gaps.sort_unstable();
    let _ = writeln!(
        stderr,
        "e2e[{scenario}]: clean handoff gaps (ms, sorted): {gaps:?}"
    );
    if verdict.passed() {
        Ok(verdict)
    } else {
        let detail = format!(
            "{}; order within holds {:?}; across owners {:?}; unexplained duplicates {:?}; lost {:?}; overlaps {:?}",
            verdict.summary(),
            verdict.records.order_violations,
            verdict.order_across_owners,
            verdict.unexplained_duplicates,
            verdict.records.lost.iter().take(20).collect::<Vec<_>>(),
            verdict.records.overlaps
        );
        Err(VerdictError::Failed {
            scenario: scenario.to_owned(),
            summary: detail,
        })
    }
}
