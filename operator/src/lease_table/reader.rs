//! Reads a KCL lease table with a consistent, paged Scan (ConsistentRead,
//! following LastEvaluatedKey), retrying throttling with full-jitter backoff,
//! and keeps the previous snapshot so each lease's counter-change time
//! carries over between scans.

use parking_lot::Mutex;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use jiff::Timestamp;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::LeaseTableError;
use super::record::LeaseRecord;
use super::snapshot::{LeaseTable, build};
use crate::aws::{Backoff, chain, client_config, is_access_code, is_throttle_code};

type TableLabels = Vec<(String, String)>;

/// Lease-table metrics: scan duration and size, per table.
#[derive(Debug, Clone)]
pub struct LeaseTableMetrics {
    /// Seconds one full scan took (all pages and retries).
    pub scan_seconds: Family<TableLabels, Histogram>,
    /// Leases in the last scan.
    pub leases: Family<TableLabels, Gauge>,
}

impl LeaseTableMetrics {
    /// Creates and registers the metrics.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            scan_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            }),
            leases: Family::default(),
        };
        registry.register(
            "lease_table_scan_seconds",
            "Duration of a full lease table scan",
            metrics.scan_seconds.clone(),
        );
        registry.register(
            "lease_table_leases",
            "Leases in the last lease table scan",
            metrics.leases.clone(),
        );
        metrics
    }
}

/// Builds a DynamoDB client with the operator's shared AWS client settings
/// ([`client_config`]: overrides, timeouts, SDK retries off).
pub fn dynamodb_client(
    base: &aws_config::SdkConfig,
    region: Option<&str>,
    endpoint: Option<&str>,
) -> Client {
    Client::new(&client_config(base, region, endpoint))
}

/// Reads one lease table, remembering the previous snapshot.
#[derive(Debug)]
pub struct LeaseTableReader {
    client: Client,
    table: String,
    stream: Option<String>,
    page_size: Option<i32>,
    backoff: Backoff,
    previous: Mutex<Option<LeaseTable>>,
    metrics: Option<LeaseTableMetrics>,
}

impl LeaseTableReader {
    /// A reader of `table`; with `stream`, multi-stream leases of other
    /// streams are ignored.
    pub fn new(
        client: Client,
        table: impl Into<String>,
        stream: Option<String>,
        metrics: Option<LeaseTableMetrics>,
    ) -> Self {
        Self {
            client,
            table: table.into(),
            stream,
            page_size: None,
            backoff: Backoff::default(),
            previous: Mutex::new(None),
            metrics,
        }
    }

    /// Sets the Scan page size (`Limit`); `None` lets DynamoDB page by 1 MB.
    pub fn with_page_size(mut self, page_size: Option<i32>) -> Self {
        self.page_size = page_size;
        self
    }

    /// Sets the retry policy.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The last snapshot, if any.
    pub fn last(&self) -> Option<LeaseTable> {
        self.previous.lock().clone()
    }

    /// Scans the table and returns the snapshot as of `now`, keeping it as
    /// the previous snapshot for the next read. A failed scan leaves the
    /// previous snapshot untouched.
    pub async fn read(&self, now: Timestamp) -> Result<LeaseTable, LeaseTableError> {
        let started = std::time::Instant::now();
        let (records, items) = self.scan().await?;
        let mut previous = self.previous.lock();
        let table = build(
            &records,
            items,
            self.stream.as_deref(),
            previous.as_ref(),
            now,
        );
        *previous = Some(table.clone());
        if let Some(metrics) = &self.metrics {
            let labels = vec![("table".to_owned(), self.table.clone())];
            metrics
                .scan_seconds
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
            metrics
                .leases
                .get_or_create(&labels)
                .set(i64::try_from(table.leases.len()).unwrap_or(i64::MAX));
        }
        Ok(table)
    }

    /// Scans every page with ConsistentRead; returns the parsed records and
    /// the number of items seen.
    pub async fn scan(&self) -> Result<(Vec<LeaseRecord>, usize), LeaseTableError> {
        let mut records = Vec::new();
        let mut items = 0usize;
        let mut start_key = None;
        let mut failures = 0u32;
        loop {
            let result = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_limit(self.page_size)
                .set_exclusive_start_key(start_key.clone())
                .send()
                .await;
            match result {
                Ok(page) => {
                    items += page.items().len();
                    records.extend(page.items().iter().filter_map(LeaseRecord::from_item));
                    match page.last_evaluated_key() {
                        Some(key) if !key.is_empty() => start_key = Some(key.clone()),
                        _ => break,
                    }
                }
                Err(error) => {
                    let (error, retry) = classify(&error, &self.table);
                    failures += 1;
                    if !retry || failures >= self.backoff.max_attempts {
                        return Err(error);
                    }
                    tokio::time::sleep(self.backoff.jittered(failures - 1)).await;
                }
            }
        }
        Ok((records, items))
    }
}

/// Maps a DynamoDB error to a [`LeaseTableError`] and whether to retry.
fn classify<E>(
    error: &SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
    table: &str,
) -> (LeaseTableError, bool)
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match error {
        SdkError::ServiceError(service) => {
            let err = service.err();
            let status = service.raw().status().as_u16();
            let detail = format!(
                "{table}: {}: {}",
                err.code().unwrap_or("HTTP error"),
                err.message().unwrap_or("")
            );
            match err.code() {
                Some("ResourceNotFoundException") => {
                    (LeaseTableError::TableNotFound(detail), false)
                }
                Some(code) if is_access_code(code) => {
                    (LeaseTableError::AccessDenied(detail), false)
                }
                Some(code) if is_throttle_code(code) => (LeaseTableError::Throttled(detail), true),
                _ if status == 429 => (LeaseTableError::Throttled(detail), true),
                _ if status == 403 => (LeaseTableError::AccessDenied(detail), false),
                _ => (LeaseTableError::Other(detail), status >= 500),
            }
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => (
            LeaseTableError::Other(format!("{table}: {}", chain(error))),
            true,
        ),
        other => (
            LeaseTableError::Other(format!("{table}: {}", chain(other))),
            false,
        ),
    }
}
