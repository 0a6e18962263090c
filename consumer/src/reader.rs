//! A Kinesis shard reader: GetShardIterator from the lease's checkpoint
//! (AFTER_SEQUENCE_NUMBER, or TRIM_HORIZON / LATEST when nothing was
//! processed yet), then a GetRecords loop with jittered exponential backoff
//! on throttling and server errors, renewing an expired iterator from the
//! last record returned. The end of a closed shard is detected from the
//! response — no NextShardIterator, or ChildShards present — never by
//! comparing sequence numbers with the shard's EndingSequenceNumber (which
//! kinesis-mock fakes).

use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::types::ShardIteratorType;

use crate::lease::Checkpoint;

/// Why reading a shard failed.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// A Kinesis call failed for good (or kept being throttled past the attempt limit).
    #[error("shard {shard}: Kinesis {action} failed: {detail}")]
    Kinesis {
        /// The shard.
        shard: String,
        /// The call.
        action: &'static str,
        /// The error with its code.
        detail: String,
    },
    /// `next_batch` was called after the shard end was returned.
    #[error("shard {0} was read to its end")]
    Ended(String),
}

impl ReaderError {
    /// Constant label for logs and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kinesis { .. } => "Kinesis",
            Self::Ended(_) => "Ended",
        }
    }
}

/// Pacing of the GetRecords loop.
#[derive(Debug, Clone)]
pub struct ReaderOptions {
    /// Records per GetRecords call (Kinesis allows up to 10,000).
    pub limit: i32,
    /// Wait after an empty batch before polling again (Kinesis allows five
    /// GetRecords calls per second per shard).
    pub idle_wait: Duration,
    /// First backoff after a throttle or server error.
    pub backoff_base: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
    /// Throttles/server errors in a row before giving up.
    pub max_attempts: u32,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            limit: 1000,
            idle_wait: Duration::from_millis(250),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            max_attempts: 20,
        }
    }
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its sequence number (decimal, up to 56 digits).
    pub sequence_number: String,
    /// Its partition key.
    pub partition_key: String,
    /// Its payload.
    pub data: Vec<u8>,
}

/// What one GetRecords call gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// Records in order.
    pub records: Vec<Record>,
    /// `Some(children)` when the shard ended with this batch.
    pub shard_end: Option<Vec<String>>,
    /// How far behind the tip the reader is.
    pub millis_behind_latest: Option<i64>,
}

/// Reads one shard.
#[derive(Debug)]
pub struct ShardReader {
    client: Client,
    stream: String,
    shard: String,
    options: ReaderOptions,
    iterator: Option<String>,
    /// Where to restart if the iterator expires.
    position: Checkpoint,
    ended: bool,
}

/// Whether `code` means "slow down and try again".
fn retryable(code: Option<&str>, status: Option<u16>) -> bool {
    matches!(
        code,
        Some(
            "ProvisionedThroughputExceededException"
                | "LimitExceededException"
                | "ThrottlingException"
                | "KMSThrottlingException"
                | "InternalFailure"
                | "InternalFailureException"
                | "ServiceUnavailable"
        )
    ) || status.is_some_and(|s| s == 429 || s >= 500)
}

/// Full-jitter backoff: uniform in [10 ms, min(max, base * 2^attempt)],
/// picked by `unit` (a draw in `[0, 1]`).
fn backoff(options: &ReaderOptions, attempt: u32, unit: f64) -> Duration {
    shardring_backoff::ceiling(options.backoff_base, options.backoff_max, attempt)
        .mul_f64(unit.clamp(0.0, 1.0))
        .max(Duration::from_millis(10))
}

impl ShardReader {
    /// Opens a reader of `shard` in `stream` (a name or an ARN) positioned
    /// after `checkpoint`: after its sequence number, or at TRIM_HORIZON /
    /// LATEST. `SHARD_END` gives a reader that is already at its end;
    /// `AT_TIMESTAMP` (whose timestamp the checkpoint does not hold) and no
    /// checkpoint start at TRIM_HORIZON.
    pub async fn open(
        client: Client,
        stream: &str,
        shard: &str,
        checkpoint: Option<&Checkpoint>,
        options: ReaderOptions,
    ) -> Result<Self, ReaderError> {
        let mut reader = Self {
            client,
            stream: stream.to_owned(),
            shard: shard.to_owned(),
            options,
            iterator: None,
            position: checkpoint.cloned().unwrap_or(Checkpoint::TrimHorizon),
            ended: checkpoint == Some(&Checkpoint::ShardEnd),
        };
        if !reader.ended {
            reader.iterator = Some(reader.get_iterator().await?);
        }
        Ok(reader)
    }

    /// The shard id.
    pub fn shard(&self) -> &str {
        &self.shard
    }

    /// Whether the shard end was reached.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The sequence number of the last record returned, or the starting checkpoint.
    pub fn position(&self) -> &Checkpoint {
        &self.position
    }

    fn next_backoff(&self, attempt: u32) -> Duration {
        backoff(&self.options, attempt, shardring_backoff::jitter_unit())
    }

    fn failure<E, R>(&self, action: &'static str, error: &SdkError<E, R>) -> ReaderError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug,
    {
        ReaderError::Kinesis {
            shard: self.shard.clone(),
            action,
            detail: format!("{}", aws_sdk_kinesis::error::DisplayErrorContext(error)),
        }
    }

    fn classify<E, R>(error: &SdkError<E, R>) -> (Option<String>, Option<u16>)
    where
        E: ProvideErrorMetadata,
        R: std::fmt::Debug,
    {
        let code = error
            .as_service_error()
            .and_then(|e| e.code())
            .map(str::to_owned);
        let status = match error {
            SdkError::ServiceError(_) => None,
            SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => Some(503),
            _ => None,
        };
        (code, status)
    }

    async fn get_iterator(&mut self) -> Result<String, ReaderError> {
        let mut attempt = 0;
        loop {
            let mut request = self.client.get_shard_iterator().shard_id(&self.shard);
            request = if self.stream.starts_with("arn:") {
                request.stream_arn(&self.stream)
            } else {
                request.stream_name(&self.stream)
            };
            request = match &self.position {
                Checkpoint::Sequence(sequence) => request
                    .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                    .starting_sequence_number(sequence),
                Checkpoint::Latest => request.shard_iterator_type(ShardIteratorType::Latest),
                Checkpoint::TrimHorizon | Checkpoint::AtTimestamp | Checkpoint::ShardEnd => {
                    request.shard_iterator_type(ShardIteratorType::TrimHorizon)
                }
            };
            match request.send().await {
                Ok(out) => {
                    return out.shard_iterator().map(str::to_owned).ok_or_else(|| {
                        ReaderError::Kinesis {
                            shard: self.shard.clone(),
                            action: "GetShardIterator",
                            detail: "no iterator returned".to_owned(),
                        }
                    });
                }
                Err(error) => {
                    let (code, status) = Self::classify(&error);
                    if !retryable(code.as_deref(), status)
                        || attempt + 1 >= self.options.max_attempts
                    {
                        return Err(self.failure("GetShardIterator", &error));
                    }
                    let wait = self.next_backoff(attempt);
                    tracing::debug!(shard = %self.shard, ?code, ?wait, "GetShardIterator throttled; backing off");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }

    /// Fetches the next batch (possibly empty; callers pace with
    /// [`ReaderOptions::idle_wait`] via [`Self::idle`]). Throttles and server
    /// errors are retried with backoff; an expired iterator is renewed from
    /// the last record returned.
    pub async fn next_batch(&mut self) -> Result<Batch, ReaderError> {
        if self.ended {
            return Err(ReaderError::Ended(self.shard.clone()));
        }
        let mut attempt = 0;
        loop {
            let iterator = match self.iterator.clone() {
                Some(iterator) => iterator,
                None => {
                    let iterator = self.get_iterator().await?;
                    self.iterator = Some(iterator.clone());
                    iterator
                }
            };
            let result = self
                .client
                .get_records()
                .shard_iterator(iterator)
                .limit(self.options.limit)
                .send()
                .await;
            let out = match result {
                Ok(out) => out,
                Err(error) => {
                    let (code, status) = Self::classify(&error);
                    if code.as_deref() == Some("ExpiredIteratorException") {
                        self.iterator = None;
                        continue;
                    }
                    if !retryable(code.as_deref(), status)
                        || attempt + 1 >= self.options.max_attempts
                    {
                        return Err(self.failure("GetRecords", &error));
                    }
                    let wait = self.next_backoff(attempt);
                    tracing::debug!(shard = %self.shard, ?code, ?wait, "GetRecords throttled; backing off");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                    continue;
                }
            };
            let records: Vec<Record> = out
                .records()
                .iter()
                .map(|record| Record {
                    sequence_number: record.sequence_number().to_owned(),
                    partition_key: record.partition_key().unwrap_or_default().to_owned(),
                    data: record.data().as_ref().to_vec(),
                })
                .collect();
            if let Some(last) = records.last() {
                self.position = Checkpoint::Sequence(last.sequence_number.clone());
            }
            let children: Vec<String> = out
                .child_shards()
                .iter()
                .map(|child| child.shard_id().to_owned())
                .collect();
            let shard_end = match out.next_shard_iterator() {
                Some(next) if children.is_empty() => {
                    self.iterator = Some(next.to_owned());
                    None
                }
                _ => {
                    self.ended = true;
                    self.iterator = None;
                    let mut children = children;
                    children.sort();
                    Some(children)
                }
            };
            return Ok(Batch {
                records,
                shard_end,
                millis_behind_latest: out.millis_behind_latest(),
            });
        }
    }

    /// Sleeps for the idle wait (call after an empty batch).
    pub async fn idle(&self) {
        tokio::time::sleep(self.options.idle_wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_and_server_errors_are_retried_others_are_not() {
        for code in [
            "ProvisionedThroughputExceededException",
            "LimitExceededException",
            "KMSThrottlingException",
            "InternalFailure",
        ] {
            assert!(retryable(Some(code), None), "{code}");
        }
        assert!(retryable(None, Some(503)));
        assert!(retryable(None, Some(429)));
        assert!(!retryable(Some("ResourceNotFoundException"), None));
        assert!(!retryable(Some("AccessDeniedException"), Some(400)));
        assert!(!retryable(None, None));
    }

    #[test]
    fn backoff_grows_to_its_cap_with_full_jitter() {
        let options = ReaderOptions::default();
        // The largest draw at each attempt doubles until the cap.
        assert_eq!(backoff(&options, 0, 1.0), Duration::from_millis(100));
        assert_eq!(backoff(&options, 3, 1.0), Duration::from_millis(800));
        assert_eq!(backoff(&options, 10, 1.0), options.backoff_max);
        assert_eq!(backoff(&options, 40, 1.0), options.backoff_max);
        // The smallest draw never spins.
        assert_eq!(backoff(&options, 5, 0.0), Duration::from_millis(10));
        let mid = backoff(&options, 2, 0.5);
        assert_eq!(mid, Duration::from_millis(200));
    }
}
