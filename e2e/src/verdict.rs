//! The end of every scenario: stop the producer, wait (with a deadline)
//! until every accepted record shows up in some consumer's record log, make
//! sure the final assignment is settled and balanced, and run the consumer
//! crate's checker — no overlapping holds, nothing lost, per-shard order,
//! children after parents — printing handoff gap p50/p99 and moves per shard.

use std::collections::HashSet;

use shardring_consumer::check::{self, CheckReport};

use crate::harness::{Harness, HarnessError, STEP_TIMEOUT};
use shardring_devkit::wait::{Probe, wait_for};

/// Why a scenario's verdict is a failure.
#[derive(Debug, thiserror::Error)]
pub enum VerdictError {
    /// The harness failed before the checker could run.
    #[error(transparent)]
    Harness(#[from] HarnessError),
    /// The checker found a violation.
    #[error("checker failed for {scenario}: {summary}")]
    Failed {
        /// The scenario.
        scenario: String,
        /// The checker's summary line.
        summary: String,
    },
}

/// Finishes `scenario`: see the module docs. Returns the checker's report
/// when it passed.
pub async fn finish(harness: &mut Harness, scenario: &str) -> Result<CheckReport, VerdictError> {
    let produced = harness.stop_producer().await;
    let wanted: HashSet<(String, String)> = produced
        .iter()
        .map(|p| (p.shard.clone(), p.sequence_number.clone()))
        .collect();
    let pods = &harness.pods;
    let all_processed = wait_for(
        "every produced record to be processed",
        STEP_TIMEOUT,
        || {
            let result = pods.processed().map(|processed| {
                let seen: HashSet<(String, String)> = processed
                    .into_iter()
                    .map(|r| (r.shard, r.sequence_number))
                    .collect();
                let missing = wanted.difference(&seen).count();
                if missing == 0 {
                    Probe::Done(())
                } else {
                    Probe::Pending(format!(
                        "{missing} of {} records not processed",
                        wanted.len()
                    ))
                }
            });
            async move { result }
        },
    )
    .await;
    if let Err(error) = all_processed {
        // Not fatal here: the checker below lists exactly what was lost.
        eprintln!("e2e[{scenario}]: {error}");
    }
    harness.wait_settled(&format!("{scenario} end")).await?;
    let parents = harness.parents().await?;
    let processed = harness.pods.processed()?;
    let report = check::check(&processed, &produced, &parents);
    eprintln!("e2e[{scenario}]: {}", report.summary());
    if !report.handoff_gaps.is_empty() {
        let mut gaps: Vec<u128> = report.handoff_gaps.iter().map(|g| g.as_millis()).collect();
        gaps.sort_unstable();
        eprintln!("e2e[{scenario}]: handoff gaps (ms, sorted): {gaps:?}");
    }
    if report.passed() {
        Ok(report)
    } else {
        Err(VerdictError::Failed {
            scenario: scenario.to_owned(),
            summary: report.summary(),
        })
    }
}
