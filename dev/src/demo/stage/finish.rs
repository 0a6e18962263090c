//! The end of a stage run: stop the producer, wait until every record it
//! wrote shows in some consumer's record log, stop the control loop and the
//! consumers, and run the consumer crate's checker into a [`Verdict`]. Also
//! the reading of the record logs (whole lines only).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use shardring_consumer::check::{self, ProcessedRecord, ProducedRecord};

use super::super::report::Verdict;
use super::super::{DemoError, STREAM};
use super::Stage;
use super::conditions::STEP_DEADLINE;
use shardring_devkit::stream::reshard;

impl Stage {
    /// Stops the producer, waits until every record it wrote was processed
    /// (or the deadline passed: the checker then lists what is missing),
    /// stops the control loop and every consumer, and runs the checker.
    /// `rolling_shards` is what the verdict divides rolling-deploy moves by.
    pub async fn finish(mut self, rolling_shards: usize) -> Result<Verdict, DemoError> {
        let (produced, failures) = match self.producer.take() {
            Some(producer) => producer.stop().await,
            None => (Vec::new(), 0),
        };
        if failures > 0 {
            println!(
                "  producer: {failures} PutRecords calls or entries failed (not expected back)"
            );
        }
        let logs = self.state().cluster.record_logs.clone();
        wait_all_processed(&logs, &produced).await?;
        self.stop_control_loop().await;
        let parents = reshard::parents(&self.kinesis, STREAM).await?;
        let (handoffs_by_phase, problems) = {
            let mut state = self.state();
            state.cluster.kill_all();
            (state.handoffs_by_phase(), state.problems.clone())
        };
        println!(
            "  consumers stopped; running the checker over {} record logs",
            logs.len()
        );
        let processed = read_logs(&logs)?;
        let report = check::check(&processed, &produced, &parents);
        Ok(Verdict {
            check: report,
            handoffs_by_phase,
            rolling_shards,
            problems,
            partitions: None,
            hot: None,
            rabbitmq: None,
            elapsed: self.started.elapsed(),
        })
    }
}

/// Every whole line of the record logs.
pub(crate) fn read_logs(logs: &[PathBuf]) -> Result<Vec<ProcessedRecord>, DemoError> {
    let mut processed = Vec::new();
    for path in logs {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error.into()),
        };
        // A consumer killed mid-write may leave a torn last line: only whole
        // lines count (its records are then not processed, and show as lost).
        let whole = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        processed.extend(check::parse_log(whole).map_err(|e| DemoError::Log {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?);
    }
    Ok(processed)
}

/// Waits until every produced record appears in some log.
async fn wait_all_processed(
    logs: &[PathBuf],
    produced: &[ProducedRecord],
) -> Result<(), DemoError> {
    let started = Instant::now();
    loop {
        let processed = read_logs(logs)?;
        let seen: HashSet<(&str, &str)> = processed
            .iter()
            .map(|r| (r.shard.as_str(), r.sequence_number.as_str()))
            .collect();
        let missing = produced
            .iter()
            .filter(|p| !seen.contains(&(p.shard.as_str(), p.sequence_number.as_str())))
            .count();
        if missing == 0 {
            println!("  all {} produced records processed", produced.len());
            return Ok(());
        }
        if started.elapsed() >= STEP_DEADLINE {
            println!("  {missing} records still unprocessed; the checker will list them");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
