//! Controller metrics, registered into the operator's registry (prefix
//! `shardring`): reconciles, errors by reason, plan duration, publish writes
//! by kind, shards and pods per ShardGroup, and the handoff protocol's health
//! (handoff duration by evidence, moves by kind, revokes pending and the age of
//! the oldest, optional-move budget remaining, release acknowledgement to
//! activation); [`ControllerMetrics::record`] records one reconcile's
//! decision.

use crate::crds::assignment::encoding::MAX_ENCODED_BYTES;
use jiff::Timestamp;
use kube::ResourceExt;
use prometheus_client::encoding::EncodeLabelSet;
use shardring_core::conditions;
use shardring_core::plan::{Decision, Moves};

use crate::crds::ShardGroup;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::sync::atomic::AtomicU64;

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

/// Labels of one bound of a group's load spread.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpreadLabels {
    /// Namespace.
    pub namespace: String,
    /// ShardGroup name.
    pub shardgroup: String,
    /// `min` or `max`.
    pub bound: &'static str,
}

/// Labels of one bound of a ConsumerPool's spread over all its groups.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolSpreadLabels {
    /// Namespace.
    pub namespace: String,
    /// ConsumerPool name.
    pub consumerpool: String,
    /// `min` or `max`.
    pub bound: &'static str,
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

/// Label of the evidence that completed a handoff.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvidenceLabel {
    /// `pod_stopped`, `lease_released`, `pod_gone`, `lease_expired` or
    /// `drain_timeout` ([`super::handoff::Evidence::label`]).
    pub evidence: &'static str,
}

/// How a hold for a returning pod ended.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HoldLabel {
    /// `returned` (the pod came back for the shard) or `moved` (it did not
    /// within the window, or will not: the shard went to another pod).
    pub outcome: &'static str,
}

/// Builds a handoff-duration histogram: 0.25 s to about 17 min, doubling, so
/// both lease-release handoffs (seconds) and drain timeouts (minutes) resolve.
fn handoff_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.25, 2.0, 13))
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
    /// Time from a revoke to the shard's activation elsewhere, by evidence.
    pub handoff_duration: Family<EvidenceLabel, Histogram, fn() -> Histogram>,
    /// Shards revoked and not yet handed over, per group.
    pub revokes_pending: Family<GroupLabels, Gauge>,
    /// Age of the oldest revoke still in flight, per group (0 when none).
    pub oldest_revoke_age: Family<GroupLabels, Gauge<f64, AtomicU64>>,
    /// Optional moves left in the current window, per group (absent when the
    /// group sets no `maxMovesPerWindow`).
    pub budget_remaining: Family<GroupLabels, Gauge>,
    /// Time from a release acknowledged at the consumer endpoint to the
    /// publish that activated the shard on its next owner.
    pub release_ack_activation: Histogram,
    /// Replicas `spec.scaling` recommends, per group (absent without it):
    /// what an HPA or KEDA scales the consumers by.
    pub recommended_replicas: Family<GroupLabels, Gauge>,
    /// Measured load per group, KB/s (`balance: throughput`).
    pub load_kbps: Family<GroupLabels, Gauge>,
    /// Least and most pod load ÷ fair share per group (`balance: throughput`).
    pub load_ratio: Family<SpreadLabels, Gauge<f64, AtomicU64>>,
    /// Pods outside the band per group after the last plan.
    pub out_of_band_pods: Family<GroupLabels, Gauge>,
    /// Fewest and most shards one Ready pod of a pool reads over all the
    /// pool's groups (the pool-wide spread).
    pub pool_shards_per_pod: Family<PoolSpreadLabels, Gauge>,
    /// Shards held, unread, for returning pods, per group.
    pub held_shards: Family<GroupLabels, Gauge>,
    /// 1 while the group's `Ready` condition is True, else 0.
    pub ready: Family<GroupLabels, Gauge>,
    /// The group's `handoff.drainTimeout`, seconds (what a revoke's age is
    /// compared with).
    pub drain_timeout: Family<GroupLabels, Gauge<f64, AtomicU64>>,
    /// Optional moves the move budget held back after the last plan.
    pub moves_deferred: Family<GroupLabels, Gauge>,
    /// Size of the published document as the API server counts it against
    /// the ConfigMap limit (keys plus values, after compression).
    pub document_bytes: Family<GroupLabels, Gauge>,
    /// The most the document may take ([`MAX_ENCODED_BYTES`]: the ConfigMap
    /// limit less headroom for metadata), the same for every group, per
    /// group so that `document_bytes / document_limit_bytes` joins 1:1.
    pub document_limit_bytes: Family<GroupLabels, Gauge>,
    /// Unix time of the group's last reconcile that ended with its
    /// document, annotations and status current (written or found so).
    pub last_success: Family<GroupLabels, Gauge<f64, AtomicU64>>,
    /// Seconds each shard was held unread for a returning pod (from the
    /// pod going away to the hold's end), by how the hold ended: the sum is
    /// the seconds unread, the count the shards held.
    pub hold_duration: Family<HoldLabel, Histogram, fn() -> Histogram>,
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
            handoff_duration: Family::new_with_constructor(handoff_histogram),
            revokes_pending: Family::default(),
            oldest_revoke_age: Family::default(),
            budget_remaining: Family::default(),
            release_ack_activation: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
            recommended_replicas: Family::default(),
            load_kbps: Family::default(),
            load_ratio: Family::default(),
            out_of_band_pods: Family::default(),
            pool_shards_per_pod: Family::default(),
            held_shards: Family::default(),
            hold_duration: Family::new_with_constructor(handoff_histogram),
            ready: Family::default(),
            drain_timeout: Family::default(),
            moves_deferred: Family::default(),
            document_bytes: Family::default(),
            document_limit_bytes: Family::default(),
            last_success: Family::default(),
        }
    }
}

impl ControllerMetrics {
    /// Records pool `consumerpool`'s spread over all its groups.
    pub(crate) fn pool_spread(&self, namespace: &str, consumerpool: &str, fewest: u64, most: u64) {
        for (bound, value) in [("min", fewest), ("max", most)] {
            let labels = PoolSpreadLabels {
                namespace: namespace.to_owned(),
                consumerpool: consumerpool.to_owned(),
                bound,
            };
            self.pool_shards_per_pod
                .get_or_create(&labels)
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

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
            "pool_shards_per_pod",
            "Fewest (bound=min) and most (bound=max) shards one Ready pod of a ConsumerPool reads over all the pool's ShardGroups",
            m.pool_shards_per_pod.clone(),
        );
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
        registry.register_with_unit(
            "handoff_duration",
            "Time from a shard's revoke to its activation on the next owner, by the evidence that the previous owner let go",
            Unit::Seconds,
            m.handoff_duration.clone(),
        );
        registry.register_with_unit(
            "release_ack_activation",
            "Time from a release acknowledged at the consumer endpoint to the publish that activated the shard on its next owner",
            Unit::Seconds,
            m.release_ack_activation.clone(),
        );
        registry.register(
            "revokes_pending",
            "Shards revoked and not yet handed over, per ShardGroup",
            m.revokes_pending.clone(),
        );
        registry.register_with_unit(
            "oldest_revoke_age",
            "Age of the oldest revoke still in flight, per ShardGroup (0 when none)",
            Unit::Seconds,
            m.oldest_revoke_age.clone(),
        );
        registry.register(
            "move_budget_remaining",
            "Optional moves left in the current rebalance window, per ShardGroup",
            m.budget_remaining.clone(),
        );
        registry.register(
            "recommended_replicas",
            "Consumer replicas spec.scaling recommends for the ShardGroup's target load per pod (the HPA/KEDA signal)",
            m.recommended_replicas.clone(),
        );
        registry.register(
            "group_load_kbps",
            "Measured load of a ShardGroup balanced by throughput, KB/s",
            m.load_kbps.clone(),
        );
        registry.register(
            "group_load_ratio",
            "Least (bound=min) and most (bound=max) pod load divided by its fair share, per ShardGroup balanced by throughput",
            m.load_ratio.clone(),
        );
        registry.register(
            "held_shards",
            "Shards held, unread, for pods that may return (ConsumerPool identity), per ShardGroup",
            m.held_shards.clone(),
        );
        registry.register_with_unit(
            "hold_duration",
            "Seconds a shard was held unread for a returning pod, from the pod going away to the end of the hold, by outcome (returned, moved)",
            Unit::Seconds,
            m.hold_duration.clone(),
        );
        registry.register(
            "group_out_of_band_pods",
            "Pods outside the throughput band after the last plan, per ShardGroup",
            m.out_of_band_pods.clone(),
        );
        registry.register(
            "group_ready",
            "1 while the ShardGroup's Ready condition is True, else 0",
            m.ready.clone(),
        );
        registry.register_with_unit(
            "group_drain_timeout",
            "The ShardGroup's handoff.drainTimeout (what shardring_oldest_revoke_age_seconds is compared with)",
            Unit::Seconds,
            m.drain_timeout.clone(),
        );
        registry.register(
            "group_moves_deferred",
            "Optional moves the move budget (rebalance.maxMovesPerWindow) held back after the last plan, per ShardGroup",
            m.moves_deferred.clone(),
        );
        registry.register_with_unit(
            "group_document",
            "Size of the published assignment document as counted against the ConfigMap limit, per ShardGroup",
            Unit::Bytes,
            m.document_bytes.clone(),
        );
        registry.register_with_unit(
            "group_document_limit",
            "The most an assignment document may take (the ConfigMap limit less headroom for metadata)",
            Unit::Bytes,
            m.document_limit_bytes.clone(),
        );
        registry.register_with_unit(
            "group_last_success_timestamp",
            "Unix time of the ShardGroup's last reconcile that left its document, annotations and status current",
            Unit::Seconds,
            m.last_success.clone(),
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

    /// Forgets every group's and pool's gauges: a replica that stops
    /// leading stops planning, and what it last exported would otherwise
    /// stand beside the new leader's values (an alert on a deferred move
    /// or an old revoke would keep firing from the old leader).
    pub(crate) fn forget_all_groups(&self) {
        self.shards.clear();
        self.pods.clear();
        self.epoch.clear();
        self.revokes_pending.clear();
        self.oldest_revoke_age.clear();
        self.budget_remaining.clear();
        self.recommended_replicas.clear();
        self.load_kbps.clear();
        self.out_of_band_pods.clear();
        self.held_shards.clear();
        self.ready.clear();
        self.drain_timeout.clear();
        self.moves_deferred.clear();
        self.document_bytes.clear();
        self.document_limit_bytes.clear();
        self.last_success.clear();
        self.load_ratio.clear();
        self.pool_shards_per_pod.clear();
    }

    /// Forgets the per-group gauges of a deleted group.
    pub(crate) fn forget(&self, labels: &GroupLabels) {
        self.shards.remove(labels);
        self.pods.remove(labels);
        self.epoch.remove(labels);
        self.revokes_pending.remove(labels);
        self.oldest_revoke_age.remove(labels);
        self.budget_remaining.remove(labels);
        self.recommended_replicas.remove(labels);
        self.load_kbps.remove(labels);
        self.out_of_band_pods.remove(labels);
        self.held_shards.remove(labels);
        self.ready.remove(labels);
        self.drain_timeout.remove(labels);
        self.moves_deferred.remove(labels);
        self.document_bytes.remove(labels);
        self.document_limit_bytes.remove(labels);
        self.last_success.remove(labels);
        for bound in ["min", "max"] {
            self.load_ratio.remove(&spread_labels(labels, bound));
        }
    }
}

fn spread_labels(labels: &GroupLabels, bound: &'static str) -> SpreadLabels {
    SpreadLabels {
        namespace: labels.namespace.clone(),
        shardgroup: labels.shardgroup.clone(),
        bound,
    }
}

/// A count as an `i64` gauge value, saturating (a gauge pinned at the top is
/// more honest than a negative one).
fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl ControllerMetrics {
    /// Records what one reconcile decided for `group`: its gauges, the
    /// moves, the completed handoffs' durations and the revoke ages.
    /// `document_bytes` is the size of the document in place after it, if
    /// known.
    pub(crate) fn record(
        &self,
        group: &ShardGroup,
        decision: &Decision,
        document_bytes: Option<usize>,
        now: Timestamp,
    ) {
        let metrics = self;
        let labels = GroupLabels {
            namespace: group.namespace().unwrap_or_default(),
            shardgroup: group.name_any(),
        };
        self.record_health(&labels, group, decision, document_bytes, now);
        metrics
            .shards
            .get_or_create(&labels)
            .set(gauge(decision.status.shards.total));
        metrics
            .pods
            .get_or_create(&labels)
            .set(gauge(decision.status.pods.eligible));
        metrics
            .epoch
            .get_or_create(&labels)
            .set(gauge(decision.status.epoch));
        let Moves {
            required, optional, ..
        } = decision.moves;
        if required > 0 {
            metrics
                .moves
                .get_or_create(&MoveLabel { kind: "required" })
                .inc_by(required);
        }
        if optional > 0 {
            metrics
                .moves
                .get_or_create(&MoveLabel { kind: "optional" })
                .inc_by(optional);
        }
        for handoff in &decision.handoffs {
            metrics
                .handoff_duration
                .get_or_create(&EvidenceLabel {
                    evidence: handoff.evidence.label(),
                })
                .observe(handoff.duration.as_secs_f64());
        }
        for end in &decision.holds_ended {
            let outcome = if end.returned { "returned" } else { "moved" };
            metrics
                .hold_duration
                .get_or_create(&HoldLabel { outcome })
                .observe(now.duration_since(end.since).as_secs_f64().max(0.0));
        }
        let status = &decision.status;
        metrics
            .held_shards
            .get_or_create(&labels)
            .set(gauge(status.shards.held));
        metrics
            .revokes_pending
            .get_or_create(&labels)
            .set(gauge(status.moves_in_flight));
        let oldest_age = status.oldest_revoke.map_or(0.0, |since| {
            now.duration_since(since).as_secs_f64().max(0.0)
        });
        metrics
            .oldest_revoke_age
            .get_or_create(&labels)
            .set(oldest_age);
        match status.move_budget_remaining {
            Some(remaining) => {
                metrics
                    .budget_remaining
                    .get_or_create(&labels)
                    .set(gauge(remaining));
            }
            None => {
                metrics.budget_remaining.remove(&labels);
            }
        }
        self.record_load(&labels, status);
    }

    /// The gauges alerts watch: Ready, the drain timeout, the deferred
    /// moves, the document's size against its limit, the last success.
    fn record_health(
        &self,
        labels: &GroupLabels,
        group: &ShardGroup,
        decision: &Decision,
        document_bytes: Option<usize>,
        now: Timestamp,
    ) {
        let ready = decision
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == conditions::READY && c.status == "True");
        self.ready.get_or_create(labels).set(i64::from(ready));
        if let Ok(timeout) = group.spec.handoff.drain_timeout() {
            self.drain_timeout
                .get_or_create(labels)
                .set(timeout.as_secs_f64());
        }
        self.moves_deferred
            .get_or_create(labels)
            .set(gauge(decision.moves.deferred));
        if let Some(bytes) = document_bytes {
            self.document_bytes
                .get_or_create(labels)
                .set(gauge(bytes as u64));
        }
        self.document_limit_bytes
            .get_or_create(labels)
            .set(gauge(MAX_ENCODED_BYTES as u64));
        // Seconds since the epoch, as a float (millisecond precision is
        // plenty for "how long since").
        #[allow(clippy::cast_precision_loss)] // milliseconds since 1970 fit in 2^53
        let seconds = now.as_millisecond() as f64 / 1000.0;
        self.last_success.get_or_create(labels).set(seconds);
    }

    /// The load gauges of `status`: the recommended replicas, and the
    /// measured load and its spread (removed when the status has none).
    fn record_load(&self, labels: &GroupLabels, status: &crate::crds::ShardGroupStatus) {
        match status.recommended_replicas {
            Some(replicas) => {
                self.recommended_replicas
                    .get_or_create(labels)
                    .set(i64::from(replicas));
            }
            None => {
                self.recommended_replicas.remove(labels);
            }
        }
        let Some(load) = &status.throughput else {
            self.load_kbps.remove(labels);
            self.out_of_band_pods.remove(labels);
            for bound in ["min", "max"] {
                self.load_ratio.remove(&spread_labels(labels, bound));
            }
            return;
        };
        self.load_kbps
            .get_or_create(labels)
            .set(gauge(load.total_kbps));
        self.out_of_band_pods
            .get_or_create(labels)
            .set(i64::from(load.out_of_band_pods));
        let bounds = load.spread.as_deref().and_then(|s| s.split_once('/'));
        if let Some((min, max)) = bounds {
            for (bound, text) in [("min", min), ("max", max)] {
                if let Ok(ratio) = text.parse::<f64>() {
                    self.load_ratio
                        .get_or_create(&spread_labels(labels, bound))
                        .set(ratio);
                }
            }
        }
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

    #[test]
    fn load_metrics_follow_the_status_and_go_with_it() {
        let mut registry = Registry::with_prefix("shardring");
        let m = ControllerMetrics::register(&mut registry);
        let group = GroupLabels {
            namespace: "shop".into(),
            shardgroup: "orders".into(),
        };
        let mut status = crate::crds::ShardGroupStatus {
            recommended_replicas: Some(7),
            throughput: Some(crate::crds::shard_group::ThroughputStatus {
                spread: Some("0.93/1.08".into()),
                total_kbps: 4096,
                out_of_band_pods: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        m.record_load(&group, &status);
        let text = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        let shown = text(&registry);
        for expected in [
            "shardring_recommended_replicas{namespace=\"shop\",shardgroup=\"orders\"} 7",
            "shardring_group_load_kbps{namespace=\"shop\",shardgroup=\"orders\"} 4096",
            "shardring_group_load_ratio{namespace=\"shop\",shardgroup=\"orders\",bound=\"min\"} 0.93",
            "shardring_group_load_ratio{namespace=\"shop\",shardgroup=\"orders\",bound=\"max\"} 1.08",
            "shardring_group_out_of_band_pods{namespace=\"shop\",shardgroup=\"orders\"} 1",
        ] {
            assert!(shown.contains(expected), "{expected} in {shown}");
        }
        status.recommended_replicas = None;
        status.throughput = None;
        m.record_load(&group, &status);
        let shown = text(&registry);
        assert!(
            !shown.contains("shardring_recommended_replicas{"),
            "{shown}"
        );
        assert!(!shown.contains("shardring_group_load_ratio{"), "{shown}");
    }

    #[test]
    fn handoff_metrics_are_exposed() {
        let mut registry = Registry::with_prefix("shardring");
        let m = ControllerMetrics::register(&mut registry);
        m.handoff_duration
            .get_or_create(&EvidenceLabel {
                evidence: "lease_released",
            })
            .observe(3.0);
        let group = GroupLabels {
            namespace: "shop".into(),
            shardgroup: "orders".into(),
        };
        m.revokes_pending.get_or_create(&group).set(2);
        m.oldest_revoke_age.get_or_create(&group).set(1.5);
        m.budget_remaining.get_or_create(&group).set(4);
        m.held_shards.get_or_create(&group).set(3);
        m.hold_duration
            .get_or_create(&HoldLabel {
                outcome: "returned",
            })
            .observe(6.5);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for expected in [
            "shardring_handoff_duration_seconds_count{evidence=\"lease_released\"} 1",
            "shardring_revokes_pending{namespace=\"shop\",shardgroup=\"orders\"} 2",
            "shardring_oldest_revoke_age_seconds{namespace=\"shop\",shardgroup=\"orders\"} 1.5",
            "shardring_move_budget_remaining{namespace=\"shop\",shardgroup=\"orders\"} 4",
            "shardring_held_shards{namespace=\"shop\",shardgroup=\"orders\"} 3",
            "shardring_hold_duration_seconds_sum{outcome=\"returned\"} 6.5",
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        m.forget(&group);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("shardgroup=\"orders\""), "{text}");
    }
}
