//! The Kinesis topology reader: lists a stream's shards with ListShards only
//! (1,000 TPS per stream, unlike DescribeStream's 10 per account), pages with
//! NextToken, retries throttling and transient failures with full-jitter
//! backoff, spaces its calls to a bounded rate, and caches the last topology
//! so callers sharing the reader refresh it at most once per interval. A
//! failed read is an error, never an empty topology.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::config::{Region, SharedCredentialsProvider};
use tokio::time::Instant;

use super::errors::{Failure, classify};
use super::metrics::KinesisMetrics;
use super::pacing::{Backoff, MinInterval};
use crate::aws::client_config;
use crate::engine::HashKeyRange;
use shardring_core::topology::SourceError;

/// Which stream to read: by name, or by ARN (cross-account streams).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StreamId {
    /// Stream name (also the name part of the ARN).
    pub name: String,
    /// Stream ARN, used in the request when set.
    pub arn: Option<String>,
}

impl StreamId {
    /// A stream addressed by name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            arn: None,
        }
    }
}

/// One shard as ListShards reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KinesisShard {
    /// `shardId-…`.
    pub id: String,
    /// The shard it was split from, or the first parent of a merge.
    pub parent: Option<String>,
    /// The second parent of a merge.
    pub adjacent_parent: Option<String>,
    /// Its hash key range.
    pub hash_key_range: Option<HashKeyRange>,
    /// Closed by a split or merge (it has an EndingSequenceNumber).
    pub closed: bool,
}

impl KinesisShard {
    /// Parent ids: none, one (split) or two (merge).
    pub fn parents(&self) -> Vec<String> {
        self.parent
            .iter()
            .chain(self.adjacent_parent.iter())
            .cloned()
            .collect()
    }
}

/// The shards of a stream at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamTopology {
    /// Every listed shard (open and closed within retention), in list order.
    pub shards: Vec<KinesisShard>,
    /// When the listing finished (monotonic clock).
    pub read_at: Instant,
    /// When the listing finished (wall clock), for status and output.
    pub read_at_wall: jiff::Timestamp,
    /// ListShards calls the listing took (pages and retries).
    pub calls: u32,
}

/// How a reader calls AWS.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReaderOptions {
    /// ListShards MaxResults (1..=10000); `None` uses the service default.
    pub page_size: Option<i32>,
    /// Retry policy for throttling and transient failures.
    pub backoff: Backoff,
    /// Least time between two ListShards calls to the stream: bounds the rate.
    pub min_call_interval: Duration,
    /// A cached topology younger than this is served without a call, so many
    /// ShardGroups on one stream cost one listing per interval.
    pub min_refresh_interval: Duration,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            page_size: None,
            backoff: Backoff::default(),
            min_call_interval: Duration::from_millis(100),
            min_refresh_interval: Duration::from_secs(10),
        }
    }
}

/// Builds a Kinesis client with [`client_config`].
pub fn kinesis_client(
    base: &aws_config::SdkConfig,
    region: Option<&str>,
    endpoint: Option<&str>,
) -> Client {
    Client::new(&client_config(base, region, endpoint))
}

/// The access key id of the emulators' static credentials.
pub(crate) const EMULATOR_ACCESS_KEY_ID: &str = "AKIDSHARDRINGLOCAL";
/// The secret of the emulators' static credentials.
pub(crate) const EMULATOR_SECRET_ACCESS_KEY: &str = "shardring-local-secret";

/// Static credentials for local emulators (they accept any signature).
pub fn emulator_credentials() -> SharedCredentialsProvider {
    SharedCredentialsProvider::new(aws_sdk_kinesis::config::Credentials::new(
        EMULATOR_ACCESS_KEY_ID,
        EMULATOR_SECRET_ACCESS_KEY,
        None,
        None,
        "shardring-emulator",
    ))
}

/// An AWS configuration for the local emulators: their static credentials
/// and `region`, nothing read from the environment that matters.
pub async fn emulator_sdk_config(region: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .credentials_provider(emulator_credentials())
        .region(Region::new(region.to_owned()))
        .load()
        .await
}

/// The environment a child `shardring run` needs to read the emulators
/// through the default chain: their static credentials, `region`, and no
/// instance-metadata probing.
pub fn emulator_environment(region: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", EMULATOR_ACCESS_KEY_ID.to_owned()),
        (
            "AWS_SECRET_ACCESS_KEY",
            EMULATOR_SECRET_ACCESS_KEY.to_owned(),
        ),
        ("AWS_REGION", region.to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ]
}

/// Reads one stream's topology; share it through [`super::ReaderRegistry`].
#[derive(Debug)]
pub struct TopologyReader {
    client: Client,
    stream: StreamId,
    options: ReaderOptions,
    pacer: MinInterval,
    cache: Mutex<Option<Arc<StreamTopology>>>,
    refresh: tokio::sync::Mutex<()>,
    metrics: Option<KinesisMetrics>,
    calls: AtomicU64,
    throttles: AtomicU64,
}

impl TopologyReader {
    /// A reader of `stream` through `client`.
    pub fn new(
        client: Client,
        stream: StreamId,
        options: ReaderOptions,
        metrics: Option<KinesisMetrics>,
    ) -> Self {
        Self {
            client,
            stream,
            pacer: MinInterval::new(options.min_call_interval),
            options,
            cache: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
            metrics,
            calls: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
        }
    }

    /// The stream this reader lists.
    pub fn stream(&self) -> &StreamId {
        &self.stream
    }

    /// ListShards calls made so far (pages and retries).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Throttled ListShards calls so far.
    pub fn throttles(&self) -> u64 {
        self.throttles.load(Ordering::Relaxed)
    }

    /// The last topology read successfully, if any.
    pub fn last(&self) -> Option<Arc<StreamTopology>> {
        self.cache.lock().clone()
    }

    /// The topology, from the cache when it is younger than the minimum
    /// refresh interval, else freshly listed. Concurrent callers share one
    /// listing. On error the cache keeps the last good topology.
    pub async fn topology(&self) -> Result<Arc<StreamTopology>, SourceError> {
        if let Some(fresh) = self.cached_within(self.options.min_refresh_interval) {
            return Ok(self.served(fresh));
        }
        let _turn = self.refresh.lock().await;
        // Another caller may have refreshed while this one waited.
        if let Some(fresh) = self.cached_within(self.options.min_refresh_interval) {
            return Ok(self.served(fresh));
        }
        let topology = match self.list().await {
            Ok(topology) => Arc::new(topology),
            Err(error) => {
                // The kept topology keeps ageing while reads fail.
                if let Some(last) = self.last() {
                    self.served(last);
                }
                return Err(error);
            }
        };
        *self.cache.lock() = Some(topology.clone());
        Ok(self.served(topology))
    }

    fn cached_within(&self, age: Duration) -> Option<Arc<StreamTopology>> {
        self.last()
            .filter(|topology| topology.read_at.elapsed() < age)
    }

    fn served(&self, topology: Arc<StreamTopology>) -> Arc<StreamTopology> {
        if let Some(metrics) = &self.metrics {
            metrics
                .topology_age_seconds
                .get_or_create(&KinesisMetrics::labels(&self.stream.name))
                .set(topology.read_at.elapsed().as_secs_f64());
        }
        topology
    }

    fn count_call(&self, throttled: bool) {
        let labels = KinesisMetrics::labels(&self.stream.name);
        if throttled {
            self.throttles.fetch_add(1, Ordering::Relaxed);
            if let Some(metrics) = &self.metrics {
                metrics.list_shards_throttles.get_or_create(&labels).inc();
            }
        } else {
            self.calls.fetch_add(1, Ordering::Relaxed);
            if let Some(metrics) = &self.metrics {
                metrics.list_shards_calls.get_or_create(&labels).inc();
            }
        }
    }

    /// Lists every shard now, bypassing the cache.
    pub async fn list(&self) -> Result<StreamTopology, SourceError> {
        const MAX_PAGES: u32 = 100_000;
        let mut shards = Vec::new();
        let mut seen = HashSet::new();
        let mut token: Option<String> = None;
        let mut failures = 0u32;
        let mut calls = 0u32;
        let mut pages = 0u32;
        loop {
            self.pacer.acquire().await;
            let request = match &token {
                // Follow-up pages carry NextToken (and the page size) only:
                // ListShards rejects a stream name next to a token.
                Some(next) => self.client.list_shards().next_token(next),
                None => match &self.stream.arn {
                    Some(arn) => self.client.list_shards().stream_arn(arn),
                    None => self.client.list_shards().stream_name(&self.stream.name),
                },
            };
            let request = request.set_max_results(self.options.page_size);
            self.count_call(false);
            calls += 1;
            match request.send().await {
                Ok(page) => {
                    pages += 1;
                    for shard in page.shards() {
                        if seen.insert(shard.shard_id().to_owned()) {
                            shards.push(convert(shard));
                        }
                    }
                    match page.next_token().filter(|next| !next.is_empty()) {
                        Some(next) if token.as_deref() == Some(next) => {
                            return Err(SourceError::Other(format!(
                                "{}: ListShards returned the same NextToken twice",
                                self.stream.name
                            )));
                        }
                        Some(_) if pages >= MAX_PAGES => {
                            return Err(SourceError::Other(format!(
                                "{}: ListShards did not finish within {MAX_PAGES} pages",
                                self.stream.name
                            )));
                        }
                        Some(next) => token = Some(next.to_owned()),
                        None => break,
                    }
                }
                Err(error) => {
                    let (error, restart) = match classify(&error, &self.stream.name) {
                        Failure::Fatal(error) => return Err(error),
                        Failure::Retry(error) => (error, false),
                        Failure::RestartListing(error) => (error, true),
                    };
                    if matches!(error, SourceError::Throttled(_)) {
                        self.count_call(true);
                    }
                    failures += 1;
                    if failures >= self.options.backoff.max_attempts {
                        tracing::warn!(stream = %self.stream.name, %error, failures, "ListShards failed; giving up");
                        return Err(error);
                    }
                    let delay = self.options.backoff.jittered(failures - 1);
                    tracing::debug!(stream = %self.stream.name, %error, ?delay, "ListShards failed; backing off");
                    tokio::time::sleep(delay).await;
                    if restart {
                        token = None;
                    }
                }
            }
        }
        if shards.is_empty() {
            // Every stream has at least one open shard: an empty list is a
            // broken response, and must never be read as "no shards".
            return Err(SourceError::Other(format!(
                "{}: ListShards returned no shards",
                self.stream.name
            )));
        }
        Ok(StreamTopology {
            shards,
            read_at: Instant::now(),
            read_at_wall: jiff::Timestamp::now(),
            calls,
        })
    }
}

fn convert(shard: &aws_sdk_kinesis::types::Shard) -> KinesisShard {
    KinesisShard {
        id: shard.shard_id().to_owned(),
        parent: shard
            .parent_shard_id()
            .filter(|id| !id.is_empty())
            .map(str::to_owned),
        adjacent_parent: shard
            .adjacent_parent_shard_id()
            .filter(|id| !id.is_empty())
            .map(str::to_owned),
        hash_key_range: shard.hash_key_range().map(|range| HashKeyRange {
            start: range.starting_hash_key().to_owned(),
            end: range.ending_hash_key().to_owned(),
        }),
        closed: shard
            .sequence_number_range()
            .and_then(|range| range.ending_sequence_number())
            .is_some_and(|end| !end.is_empty()),
    }
}
