//! Controller metrics, registered into the operator's registry (prefix
//! `shardring`): reconciles, errors by reason, plan duration, publish writes
//! by kind, and shards and pods per ShardGroup.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// Labels naming one ShardGroup.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    /// Namespace.
    pub namespace: String,
    /// ShardGroup name.
    pub shardgroup: String,
}

/// Label of an error reason.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Constant reason (`metric_label()` of the error).
    pub reason: &'static str,
}

/// Label of a write kind.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    /// `configmap`, `annotation`, `annotation_removal`, `status` or `event`.
    pub kind: &'static str,
}

/// Label of a move kind.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MoveLabel {
    /// `required` or `optional`.
    pub kind: &'static str,
}

/// Handles of the controller's metrics (cheap to clone).
#[derive(Clone)]
pub struct ControllerMetrics {
    /// Reconciles run.
    pub reconciles: Counter,
    /// Reconcile errors by reason.
    pub errors: Family<ReasonLabel, Counter>,
    /// Time of the pure plan step, seconds.
    pub plan_duration: Histogram,
    /// Write requests sent, by kind.
    pub writes: Family<WriteLabel, Counter>,
    /// Shard moves published, by kind.
    pub moves: Family<MoveLabel, Counter>,
    /// Readable shards per group.
    pub shards: Family<GroupLabels, Gauge>,
    /// Eligible pods per group.
    pub pods: Family<GroupLabels, Gauge>,
    /// Published epoch per group.
    pub epoch: Family<GroupLabels, Gauge>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            errors: Family::default(),
            plan_duration: Histogram::new(exponential_buckets(0.0001, 4.0, 10)),
            writes: Family::default(),
            moves: Family::default(),
            shards: Family::default(),
            pods: Family::default(),
            epoch: Family::default(),
        }
    }
}

impl ControllerMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "reconciles",
            "ShardGroup reconciles run",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "ShardGroup reconcile errors by reason",
            m.errors.clone(),
        );
        registry.register_with_unit(
            "plan_duration",
            "Time of the pure plan step",
            Unit::Seconds,
            m.plan_duration.clone(),
        );
        registry.register(
            "publish_writes",
            "Write requests sent to the API server, by kind",
            m.writes.clone(),
        );
        registry.register("moves", "Shard moves published, by kind", m.moves.clone());
        registry.register(
            "group_shards",
            "Readable shards per ShardGroup",
            m.shards.clone(),
        );
        registry.register("group_pods", "Eligible pods per ShardGroup", m.pods.clone());
        registry.register(
            "group_epoch",
            "Published epoch per ShardGroup",
            m.epoch.clone(),
        );
        m
    }

    /// Counts one write request of `kind`.
    pub fn write(&self, kind: &'static str) {
        self.writes.get_or_create(&WriteLabel { kind }).inc();
    }

    /// Counts one reconcile error.
    pub fn error(&self, reason: &'static str) {
        self.errors.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Forgets the per-group gauges of a deleted group.
    pub fn forget(&self, labels: &GroupLabels) {
        self.shards.remove(labels);
        self.pods.remove(labels);
        self.epoch.remove(labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_under_the_prefix() {
        let mut registry = Registry::with_prefix("shardring");
        let m = ControllerMetrics::register(&mut registry);
        m.reconciles.inc();
        m.write("configmap");
        m.error("SourceError");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("shardring_reconciles_total 1"), "{text}");
        assert!(
            text.contains("shardring_publish_writes_total{kind=\"configmap\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("shardring_reconcile_errors_total{reason=\"SourceError\"} 1"),
            "{text}"
        );
    }
}
