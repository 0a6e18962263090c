//! Load reports: what this pod reads, per shard, sent to the endpoint
//! (`POST .../loads`) for `balance: throughput` and the scaling signal.
//! The worker counts bytes and records per shard into a [`LoadMeter`] (the
//! [`Metered`] record handler does it for any handler); a [`LoadReporter`]
//! task turns the counts into rates every interval and reports the shards
//! the newest view lists as active, at that view's epoch, in reports of at
//! most [`MAX_REPORTED_SHARDS`] shards.
//!
//! It goes through the same client as the view and the releases: the same
//! token, the same per-pod rate limit (one request per report every
//! interval, 10 s by default, against 120 per 10 s). A 429 or an exhausted
//! window holds it as told; a group that does not use loads (409
//! `LoadNotUsed`) or that the leader does not know yet (404) is asked again
//! only every minute; a report from an epoch the leader has not published
//! (409 `FutureEpoch`, a new leader catching up) is dropped, the next one
//! carries fresh rates. Rates the operator refused come back with their
//! reason and are logged, once per reason.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardring_crds::endpoint::{LoadReport, MAX_REPORTED_SHARDS, ShardRate};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::client::EndpointClient;
use super::retry::RetryPolicy;
use super::source::{error_rate_hold, log_failure};
use crate::reader::Record;
use crate::view::AssignmentView;
use crate::worker::{RecordHandler, ShardContext};

/// How often a reporter reports unless told otherwise.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(10);
/// How long it waits before asking again a group that does not use loads.
const NOT_USED_RETRY: Duration = Duration::from_secs(60);

/// Bytes and records read per shard since the last report; cheap to clone
/// (clones count into the same totals).
#[derive(Debug, Clone, Default)]
pub struct LoadMeter {
    counts: Arc<Mutex<HashMap<String, (u64, u64)>>>,
}

impl LoadMeter {
    /// Counts `records` records of `bytes` bytes read from `shard`.
    pub fn record(&self, shard: &str, bytes: u64, records: u64) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let entry = counts.entry(shard.to_owned()).or_default();
        entry.0 += bytes;
        entry.1 += records;
    }

    /// The counts since the last call, and starts over.
    pub fn take(&self) -> HashMap<String, (u64, u64)> {
        std::mem::take(&mut *self.counts.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A record handler that counts what it handles into a [`LoadMeter`] before
/// handing it on.
#[derive(Debug)]
pub struct Metered<H> {
    /// The handler that processes the records.
    pub inner: H,
    /// Where the counts go.
    pub meter: LoadMeter,
}

impl<H: RecordHandler> RecordHandler for Metered<H> {
    async fn handle(&self, context: &ShardContext, records: &[Record]) -> anyhow::Result<()> {
        let bytes: usize = records.iter().map(|r| r.data.len()).sum();
        self.meter
            .record(&context.shard, bytes as u64, records.len() as u64);
        self.inner.handle(context, records).await
    }
}

/// Turns a window's counts into the rates of the shards `active` lists:
/// each shard's counts over the time it was active in the window (a shard
/// active for less than half the window is left out: too little to judge).
pub fn rates(
    counts: &HashMap<String, (u64, u64)>,
    active: &BTreeMap<String, Duration>,
    window: Duration,
) -> Vec<ShardRate> {
    active
        .iter()
        .filter(|(_, held)| **held >= window / 2)
        .map(|(shard, held)| {
            let seconds = held.min(&window).as_secs_f64().max(0.001);
            let (bytes, records) = counts.get(shard).copied().unwrap_or_default();
            ShardRate {
                shard: shard.clone(),
                bytes_per_second: bytes as f64 / seconds,
                records_per_second: records as f64 / seconds,
            }
        })
        .collect()
}

/// Reports this pod's load to the endpoint; dropping it stops its task.
#[derive(Debug)]
pub struct LoadReporter {
    task: JoinHandle<()>,
}

impl Drop for LoadReporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LoadReporter {
    /// Starts reporting `meter`'s counts for `namespace/group` every
    /// `interval`, following `view` (the view the worker reads).
    pub fn spawn(
        client: EndpointClient,
        namespace: impl Into<String>,
        group: impl Into<String>,
        view: AssignmentView,
        meter: LoadMeter,
        interval: Duration,
    ) -> Self {
        let task = tokio::spawn(run(
            client,
            namespace.into(),
            group.into(),
            view,
            meter,
            interval,
        ));
        Self { task }
    }
}

async fn run(
    client: EndpointClient,
    namespace: String,
    group: String,
    view: AssignmentView,
    meter: LoadMeter,
    interval: Duration,
) {
    let mut policy = RetryPolicy::default();
    let mut window_start = Instant::now();
    let mut since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut logged: BTreeSet<String> = BTreeSet::new();
    let mut next = Instant::now() + interval;
    loop {
        tokio::time::sleep_until(next).await;
        next = Instant::now() + interval;
        let now = Instant::now();
        let window = now - window_start;
        window_start = now;
        let counts = meter.take();
        let Some(current) = view.current() else {
            continue;
        };
        // How long each active shard has been active within this window (a
        // shard first seen active now is reported from the next window on:
        // when it became active within this one is not known).
        since.retain(|shard, _| current.active.contains(shard));
        for shard in &current.active {
            since.entry(shard.clone()).or_insert(now);
        }
        let held: BTreeMap<String, Duration> = since
            .iter()
            .map(|(shard, at)| (shard.clone(), now - (*at).max(now - window)))
            .collect();
        let all = rates(&counts, &held, window);
        for chunk in all.chunks(MAX_REPORTED_SHARDS) {
            let report = LoadReport {
                epoch: current.epoch,
                shards: chunk.to_vec(),
            };
            match client.loads(&namespace, &group, &report).await {
                Ok((response, rate)) => {
                    policy.succeeded();
                    for rejected in &response.rejected {
                        if logged.insert(rejected.reason.clone()) {
                            tracing::warn!(shard = %rejected.shard, reason = %rejected.reason, message = %rejected.message, "the endpoint refused a load reading (logged once per reason)");
                        }
                    }
                    if let Some(hold) = rate.hold() {
                        next = next.max(Instant::now() + hold);
                        break;
                    }
                }
                Err(error)
                    if matches!(error.reason(), Some("LoadNotUsed" | "UnknownShardGroup")) =>
                {
                    tracing::debug!(%error, "the ShardGroup takes no load reports (yet); asking again in a minute");
                    next = next.max(Instant::now() + NOT_USED_RETRY);
                    break;
                }
                Err(error) if error.reason() == Some("FutureEpoch") => {
                    tracing::debug!(%error, "the leader has not published this view yet; the next report carries fresh rates");
                    break;
                }
                Err(error) => {
                    let mut wait = policy.delay(error.failure());
                    if let Some(hold) = error_rate_hold(&error) {
                        wait = wait.max(hold);
                    }
                    log_failure(&error, &client, wait);
                    next = next.max(Instant::now() + wait);
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_cover_the_time_each_shard_was_active() {
        let counts = HashMap::from([
            ("a".to_owned(), (10_000, 100)),
            ("b".to_owned(), (3_000, 30)),
        ]);
        let window = Duration::from_secs(10);
        let active = BTreeMap::from([
            ("a".to_owned(), window),
            ("b".to_owned(), Duration::from_secs(6)),
            ("c".to_owned(), window),
            ("d".to_owned(), Duration::from_secs(2)),
        ]);
        let rates = rates(&counts, &active, window);
        let by_shard: BTreeMap<&str, (f64, f64)> = rates
            .iter()
            .map(|r| (r.shard.as_str(), (r.bytes_per_second, r.records_per_second)))
            .collect();
        assert_eq!(by_shard.len(), 3, "d was active too briefly: {by_shard:?}");
        assert!((by_shard["a"].0 - 1000.0).abs() < 1e-9);
        assert!((by_shard["b"].0 - 500.0).abs() < 1e-9);
        assert!((by_shard["b"].1 - 5.0).abs() < 1e-9);
        // An active shard that carried nothing is reported idle, not left out.
        assert_eq!(by_shard["c"].0.to_bits(), 0.0f64.to_bits());
    }

    #[test]
    fn the_meter_counts_until_taken() {
        let meter = LoadMeter::default();
        let clone = meter.clone();
        meter.record("a", 10, 1);
        clone.record("a", 5, 2);
        assert_eq!(meter.take()["a"], (15, 3));
        assert!(meter.take().is_empty());
    }
}
