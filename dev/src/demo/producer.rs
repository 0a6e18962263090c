//! The demo's producer: PutRecords batches with many partition keys, from
//! start to stop, keeping every record Kinesis accepted (shard and sequence
//! number) so the checker can prove none was lost. Failed entries of a batch
//! were never written, so they are not expected back.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use shardring_consumer::check::ProducedRecord;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Distinct partition keys the producer cycles through.
pub(crate) const PARTITION_KEYS: u64 = 500;

/// A running producer.
#[derive(Debug)]
pub struct Producer {
    produced: Arc<Mutex<Vec<ProducedRecord>>>,
    failures: Arc<Mutex<u64>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Producer {
    /// Starts writing `batch` records to `stream` every `interval`.
    pub fn start(
        client: aws_sdk_kinesis::Client,
        stream: String,
        batch: usize,
        interval: Duration,
    ) -> Self {
        let produced = Arc::new(Mutex::new(Vec::new()));
        let failures = Arc::new(Mutex::new(0));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            client,
            stream,
            batch,
            interval,
            produced.clone(),
            failures.clone(),
            stop.clone(),
        ));
        Self {
            produced,
            failures,
            stop,
            task,
        }
    }

    /// Records accepted so far.
    pub fn produced(&self) -> Vec<ProducedRecord> {
        self.produced.lock().clone()
    }

    /// How many records were accepted so far.
    pub fn count(&self) -> usize {
        self.produced.lock().len()
    }

    /// Stops after the batch in flight; returns every accepted record and
    /// the number of failed calls or entries.
    pub async fn stop(mut self) -> (Vec<ProducedRecord>, u64) {
        self.stop.cancel();
        let _ = (&mut self.task).await;
        let failures = *self.failures.lock();
        let produced = self.produced.lock();
        (produced.clone(), failures)
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // An early return or Ctrl-C drops the producer without `stop`: end
        // its task too, rather than leave it writing to a stopped emulator.
        self.stop.cancel();
    }
}

async fn run(
    client: aws_sdk_kinesis::Client,
    stream: String,
    batch: usize,
    interval: Duration,
    produced: Arc<Mutex<Vec<ProducedRecord>>>,
    failures: Arc<Mutex<u64>>,
    stop: CancellationToken,
) {
    let mut sequence: u64 = 0;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.is_cancelled() {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let entries: Vec<PutRecordsRequestEntry> = (0..batch)
            .filter_map(|_| {
                sequence += 1;
                PutRecordsRequestEntry::builder()
                    .partition_key(format!("customer-{}", sequence % PARTITION_KEYS))
                    .data(Blob::new(format!("order-{sequence}")))
                    .build()
                    .ok()
            })
            .collect();
        let result = client
            .put_records()
            .stream_name(&stream)
            .set_records(Some(entries))
            .send()
            .await;
        match result {
            Ok(output) => {
                let mut accepted = Vec::new();
                let mut failed = 0;
                for entry in output.records() {
                    match (entry.shard_id(), entry.sequence_number()) {
                        (Some(shard), Some(sequence_number)) if entry.error_code().is_none() => {
                            accepted.push(ProducedRecord {
                                shard: shard.to_owned(),
                                sequence_number: sequence_number.to_owned(),
                            });
                        }
                        _ => failed += 1,
                    }
                }
                produced.lock().extend(accepted);
                *failures.lock() += failed;
            }
            Err(error) => {
                tracing::warn!(error = %aws_sdk_kinesis::error::DisplayErrorContext(&error), "PutRecords failed");
                *failures.lock() += 1;
            }
        }
    }
}
