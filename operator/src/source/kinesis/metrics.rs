//! Prometheus metrics of the Kinesis topology readers: ListShards calls and
//! throttles per stream, and the age of the topology served to callers.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Label set: the stream a metric is about.
pub(crate) type StreamLabels = Vec<(String, String)>;

/// Metric handles shared by every reader (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct KinesisMetrics {
    /// ListShards calls made (each page counts).
    pub list_shards_calls: Family<StreamLabels, Counter>,
    /// ListShards calls that were throttled.
    pub list_shards_throttles: Family<StreamLabels, Counter>,
    /// Age in seconds of the topology served by the last read (on a failed
    /// read: of the last good topology, so it grows while reads fail).
    pub topology_age_seconds: Family<StreamLabels, Gauge<f64, AtomicU64>>,
}

impl KinesisMetrics {
    /// Creates the metrics and registers them (prefix added by the registry
    /// the caller passes, e.g. `shardring`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "kinesis_list_shards_calls",
            "ListShards calls made, per stream (each page counts)",
            metrics.list_shards_calls.clone(),
        );
        registry.register(
            "kinesis_list_shards_throttles",
            "ListShards calls throttled by Kinesis, per stream",
            metrics.list_shards_throttles.clone(),
        );
        registry.register(
            "kinesis_topology_age_seconds",
            "Age of the shard topology served by the last read, per stream",
            metrics.topology_age_seconds.clone(),
        );
        metrics
    }

    /// The label set of `stream`.
    pub fn labels(stream: &str) -> StreamLabels {
        vec![("stream".to_owned(), stream.to_owned())]
    }
}
