//! Plan: the pure heart of a reconcile. From one [`Observation`] it decides
//! the document to publish (if it changed), the pod annotations to write or
//! remove, the status, the Events and when to look again. No I/O and no
//! clock: the same observation always gives the same [`Decision`].
//!
//! Safety rules kept here: a missing pool, a pool with no ready pods, a
//! failed topology read or an engine error never touch the published
//! document or the annotations: the last assignment stays in place and the
//! status says why. A failed read with a known topology plans on the last good
//! one (the document never shrinks because of a read error).

use std::borrow::Cow;
use std::time::Duration;

use jiff::Timestamp;

use super::codec;
use super::conditions::reason;
use super::document::{self, AnnotationWrite};
use super::events::EventNote;
use super::handoff;
use super::observe::{Observation, PodInfo};
use super::pacing;
use super::status::{self, Outcome, Problem};
use crate::crds::shard_group::{PodCounts, ShardCounts, ShardGroupSpec};
use crate::crds::{AssignmentDocument, ConsumerPool, ShardGroupStatus, ShardPhase};
use crate::engine::{self, Balance, PlanInput, PlanOptions, PlanOutput, Rebalance, ShardState};

/// How often a static source is re-read (it cannot change without a spec
/// change, which triggers a reconcile anyway).
pub const STATIC_REFRESH: Duration = Duration::from_secs(300);
/// Retry interval after a failed topology read, when shorter than the refresh.
pub const ERROR_RETRY: Duration = Duration::from_secs(30);
/// Refresh used when a Kinesis refresh interval cannot be read.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(30);
/// How often a group with handoffs in flight looks for evidence again (the
/// lease table and pod deletions do not trigger a reconcile by themselves).
pub const IN_FLIGHT_POLL: Duration = Duration::from_secs(2);
/// Shortest requeue for a timer (a drain timeout or the rebalance delay).
pub const MIN_REQUEUE: Duration = Duration::from_millis(100);

/// What one reconcile should do.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The document to publish, when its content changed (epoch already increased).
    pub document_write: Option<AssignmentDocument>,
    /// `document_write` as the ConfigMap carries it, encoded (and compressed)
    /// once here, where its size is checked, and written as is.
    pub encoded_document: Option<codec::EncodedDocument>,
    /// Pods whose annotation must change, sorted by pod name.
    pub annotation_writes: Vec<AnnotationWrite>,
    /// The status to publish.
    pub status: ShardGroupStatus,
    /// Whether `status` differs from the current one (else no status write).
    pub status_changed: bool,
    /// Events to publish.
    pub events: Vec<EventNote>,
    /// When to reconcile again without a watch event.
    pub requeue_after: Duration,
    /// Moves decided in this plan: (required, optional).
    pub moves: (u64, u64),
    /// Handoffs completed in this plan (for the handoff metrics).
    pub handoffs: Vec<handoff::Completed>,
}

/// Plans one reconcile of the observed ShardGroup.
pub fn plan(obs: &Observation) -> Decision {
    let published = obs.published.document();
    let status_epoch = obs.group.status.as_ref().map_or(0, |s| s.epoch);
    let kept_epoch = published.map_or(0, |d| d.epoch).max(status_epoch);
    let mut outcome = Outcome {
        epoch: kept_epoch,
        ..Default::default()
    };
    outcome.pods_with_shards = published.map_or(0, |d| d.pods.len() as u64);
    outcome.moves_in_flight = published.map_or(0, moves_in_flight);
    let requeue_after = requeue_after(obs);

    if let Err(error) = check_spec(&obs.group.spec) {
        outcome.problem = Some(Problem {
            reason: reason::INVALID_SPEC,
            message: format!("{error}; fix the ShardGroup spec"),
            blocks_ready: true,
        });
        return blocked(obs, outcome, requeue_after);
    }
    let Some(pool) = &obs.pool else {
        outcome.problem = Some(Problem {
            reason: reason::POOL_NOT_FOUND,
            message: format!(
                "ConsumerPool {:?} not found in this namespace; create it or fix spec.poolRef.name (the last assignment, epoch {kept_epoch}, stays in place)",
                obs.group.spec.pool_ref.name
            ),
            blocks_ready: true,
        });
        return blocked(obs, outcome, requeue_after);
    };
    let pods = engine_pods(&obs.pods, pool, obs.now);
    outcome.pods = pod_counts(&obs.pods, &pods);
    let Some(topology) = &obs.topology.last_good else {
        let problem = match &obs.topology.error {
            Some(error) => Problem {
                reason: error.reason(),
                message: format!("cannot read the source: {error}"),
                blocks_ready: true,
            },
            None => Problem {
                reason: reason::TOPOLOGY_UNKNOWN,
                message: "the source has not been read yet".into(),
                blocks_ready: true,
            },
        };
        outcome.problem = Some(problem);
        return blocked(obs, outcome, requeue_after);
    };
    if outcome.pods.eligible == 0 {
        outcome.problem = Some(Problem {
            reason: reason::NO_READY_PODS,
            message: format!(
                "ConsumerPool {:?} selects {} pods and none is Ready for minReadySeconds ({}s) without terminating; the last assignment (epoch {kept_epoch}) stays in place",
                obs.group.spec.pool_ref.name, outcome.pods.selected, pool.spec.min_ready_seconds
            ),
            blocks_ready: true,
        });
        return blocked(obs, outcome, requeue_after);
    }

    let recovered = handoff::recover_previous(obs);
    let previous_doc = published.or(recovered.as_ref());
    let current = obs.group.status.clone().unwrap_or_default();
    let pacing = pacing::pace(
        &obs.group.spec.rebalance,
        current.last_pod_change.as_deref(),
        current.pod_set_digest.as_deref(),
        &current.move_log,
        pods.iter()
            .filter(|p| p.ready && !p.terminating)
            .map(|p| p.name.as_str()),
        obs.now,
    );
    let input = PlanInput {
        options: plan_options(obs, pool, &pacing),
        shards: topology.shards.clone(),
        pods,
        previous: handoff::engine_previous(previous_doc),
    };
    // While the delay holds optional moves back, look again when it ends,
    // but only if there is something to rebalance then.
    let pacing_wait = pacing.next_change.filter(|_| {
        let mut unpaced = input.clone();
        unpaced.options.rebalance = Rebalance::All;
        unpaced.options.max_optional_moves = None;
        engine::plan(&unpaced).is_ok_and(|o| o.optional_moves() > 0)
    });
    let output = match engine::plan(&input) {
        Ok(output) => output,
        Err(error) => {
            outcome.problem = Some(Problem {
                reason: reason::PLAN_FAILED,
                message: format!("the assignment engine refused the input: {error}"),
                blocks_ready: true,
            });
            return blocked(obs, outcome, requeue_after);
        }
    };

    let timing = handoff::Timing {
        drain_timeout: obs.group.spec.handoff.drain_timeout().unwrap_or_default(),
        lease_failover: obs.group.spec.handoff.lease_failover().unwrap_or_default(),
    };
    let mut step = handoff::step(obs, timing, topology, &output, previous_doc);
    let mut records = std::mem::take(&mut step.records);
    document::add_lineage(&mut records, &obs.topology.lineage);
    let doc = document::next_document(obs.group.qualified_name(), records, published, kept_epoch);
    let changed = matches!(doc, Cow::Owned(_));
    let encoded_document = if changed {
        match codec::encode(&doc) {
            Ok(encoded) => Some(encoded),
            Err(error) => {
                outcome.problem = Some(Problem {
                    reason: error.reason(),
                    message: format!(
                        "{error}; the last assignment (epoch {kept_epoch}) stays in place"
                    ),
                    blocks_ready: true,
                });
                return blocked(obs, outcome, requeue_after);
            }
        }
    } else {
        None
    };

    outcome.epoch = doc.epoch;
    outcome.shards = Some(shard_counts(topology, &output));
    outcome.load = Some(load_range(&output));
    outcome.moves_in_flight = moves_in_flight(&doc);
    outcome.pods_with_shards = doc.pods.len() as u64;
    // The read time of the topology the published document reflects: it
    // moves with the document, so a restart (which re-reads the same
    // topology) or time passing writes nothing.
    let recorded = obs
        .group
        .status
        .as_ref()
        .and_then(|s| s.last_topology_time.as_ref());
    if changed || recorded.is_none() {
        outcome.topology_time = obs.topology.read_at.map(|t| t.to_string());
    }
    let moved = output.required_moves() + output.optional_moves();
    let (move_log, move_budget_remaining) = pacing.record(moved, obs.now);
    outcome.protocol = Some(handoff::ProtocolStatus {
        move_log,
        move_budget_remaining,
        last_pod_change: Some(pacing.last_pod_change.to_string()),
        pod_set_digest: Some(pacing.pod_set_digest),
        graceful_pods: step.graceful_pods.clone(),
        drain_started: step.drain_started.clone(),
        oldest_revoke: step.oldest_revoke.map(|t| t.to_string()),
        unfenced: obs.group.spec.lease_table.is_none(),
    });
    let mut requeue_after = requeue_after;
    for wait in [step.next_check, pacing_wait].into_iter().flatten() {
        requeue_after = requeue_after.min(wait.max(MIN_REQUEUE));
    }
    if outcome.moves_in_flight > 0 {
        requeue_after = requeue_after.min(IN_FLIGHT_POLL);
    }
    outcome.problem = obs.topology.error.as_ref().map(|error| Problem {
        reason: error.reason(),
        message: stale_message(obs, error),
        blocks_ready: false,
    });

    let (annotation_writes, oversized) =
        document::annotation_writes(&doc, &obs.pods, &obs.group.annotation_key());
    if let Some(first) = oversized.first() {
        // The other pods still get their views; these pods keep their old
        // annotation, so they must read the ConfigMap to follow along.
        let names: Vec<&str> = oversized.iter().map(|o| o.pod.as_str()).collect();
        let message = format!(
            "the annotation of {} pods ({}) is not written: {}",
            names.len(),
            names.join(", "),
            first.error
        );
        match &mut outcome.problem {
            // One Degraded condition: a stale topology keeps its reason and
            // the oversized views are named in its message.
            Some(problem) => problem.message = format!("{}; also, {message}", problem.message),
            None => {
                outcome.problem = Some(Problem {
                    reason: first.error.reason(),
                    message,
                    blocks_ready: false,
                })
            }
        }
    }
    let (status, mut events) = status::build(obs, &outcome);
    if changed {
        events.insert(
            0,
            EventNote::normal(
                reason::PUBLISHED,
                published_message(&doc, &output, published.is_none()),
            ),
        );
    }
    let status_changed = obs.group.status.as_ref() != Some(&status);
    Decision {
        document_write: changed.then(|| doc.into_owned()),
        encoded_document,
        annotation_writes,
        status,
        status_changed,
        events,
        requeue_after,
        moves: (output.required_moves(), output.optional_moves()),
        handoffs: step.completed,
    }
}

/// A decision that keeps the document and annotations as they are.
fn blocked(obs: &Observation, outcome: Outcome, requeue_after: Duration) -> Decision {
    let (status, events) = status::build(obs, &outcome);
    let status_changed = obs.group.status.as_ref() != Some(&status);
    Decision {
        document_write: None,
        encoded_document: None,
        annotation_writes: Vec::new(),
        status,
        status_changed,
        events,
        requeue_after,
        moves: (0, 0),
        handoffs: Vec::new(),
    }
}

/// Interprets every duration of the spec, so a stored spec that predates a
/// validation rule is reported instead of guessed at.
fn check_spec(spec: &ShardGroupSpec) -> Result<(), crate::crds::shard_group::SpecError> {
    spec.handoff.drain_timeout()?;
    spec.handoff.lease_failover()?;
    spec.rebalance.delay()?;
    spec.rebalance.window()?;
    if let Some(kinesis) = &spec.source.kinesis {
        kinesis.refresh_interval()?;
    }
    Ok(())
}

/// Engine options from the spec and pool.
fn plan_options(obs: &Observation, pool: &ConsumerPool, pacing: &pacing::Pacing) -> PlanOptions {
    let spec = &obs.group.spec;
    PlanOptions {
        consumer_name: obs.group.consumer_name(),
        balance: match spec.balance {
            crate::crds::shard_group::BalanceMode::Count => Balance::Count,
            crate::crds::shard_group::BalanceMode::HashRange => Balance::HashRange,
        },
        standbys: spec.standbys,
        max_shards_per_pod: pool.spec.max_shards_per_pod.unwrap_or(0),
        rebalance: pacing.rebalance,
        max_optional_moves: pacing.max_optional_moves,
    }
}

/// Whether a pod may receive shards at `now`: Ready for the pool's
/// `minReadySeconds` and not terminating.
pub fn eligible(pod: &PodInfo, min_ready: Duration, now: Timestamp) -> bool {
    pod.selected && pod.deletion_timestamp.is_none() && ready_for(pod, min_ready, now)
}

fn ready_for(pod: &PodInfo, min_ready: Duration, now: Timestamp) -> bool {
    if !pod.ready {
        return false;
    }
    if min_ready.is_zero() {
        return true;
    }
    // Without a transition time the pod has been Ready as long as we know.
    pod.ready_since.is_none_or(|since| {
        since
            .as_millisecond()
            .saturating_add(i64::try_from(min_ready.as_millis()).unwrap_or(i64::MAX))
            <= now.as_millisecond()
    })
}

/// The pool's selected pods as engine pods (not-yet-eligible pods are passed
/// as not ready, terminating ones as terminating, so their shards move).
fn engine_pods(pods: &[PodInfo], pool: &ConsumerPool, now: Timestamp) -> Vec<engine::Pod> {
    let min_ready = pool.spec.min_ready();
    pods.iter()
        .filter(|p| p.selected)
        .map(|p| engine::Pod {
            name: p.name.clone(),
            ready: ready_for(p, min_ready, now),
            terminating: p.deletion_timestamp.is_some(),
            capacity: pool.spec.capacity.weight_of(&p.labels).max(1),
            zone: p.zone.clone(),
            node: p.node_name.clone(),
            ready_since: p.ready_since.map(|t| t.as_second()),
        })
        .collect()
}

fn pod_counts(all: &[PodInfo], pods: &[engine::Pod]) -> PodCounts {
    PodCounts {
        selected: all.iter().filter(|p| p.selected).count() as u64,
        eligible: pods.iter().filter(|p| p.ready && !p.terminating).count() as u64,
    }
}

fn shard_counts(topology: &crate::source::Topology, output: &PlanOutput) -> ShardCounts {
    let live = |s: &&engine::Shard| s.state != ShardState::Complete;
    let pending = output.pending.len() as u64;
    let listed = topology.shards.iter().filter(live).count() as u64;
    ShardCounts {
        total: listed.saturating_sub(pending),
        open: topology
            .shards
            .iter()
            .filter(|s| s.state == ShardState::Open)
            .count() as u64,
        closed: topology
            .shards
            .iter()
            .filter(|s| s.state == ShardState::Closed)
            .count() as u64,
        pending,
        unassigned: output.unassigned.len() as u64,
    }
}

fn load_range(output: &PlanOutput) -> (u64, u64) {
    let min = output.loads.values().copied().min().unwrap_or(0);
    let max = output.loads.values().copied().max().unwrap_or(0);
    (min, max)
}

fn moves_in_flight(doc: &AssignmentDocument) -> u64 {
    doc.shards
        .values()
        .filter(|r| r.state == ShardPhase::Revoking)
        .count() as u64
}

fn published_message(doc: &AssignmentDocument, output: &PlanOutput, first: bool) -> String {
    let owned = doc.shards.values().filter(|r| r.owner.is_some()).count();
    let what = if first {
        "first assignment"
    } else {
        "assignment"
    };
    format!(
        "published {what} at epoch {}: {owned} shards on {} pods, {} moved ({} required, {} optional)",
        doc.epoch,
        doc.pods.len(),
        output.moves,
        output.required_moves(),
        output.optional_moves()
    )
}

/// The Degraded message for a failed read planned on the last good
/// topology: the error, and how old that topology is.
fn stale_message(obs: &Observation, error: &crate::source::SourceError) -> String {
    let age = obs
        .topology
        .confirmed_at
        .or(obs.topology.read_at)
        .map(|at| {
            let secs = (obs.now.as_second() - at.as_second()).max(0);
            format!("last read successfully at {at} ({secs}s ago)")
        })
        .unwrap_or_else(|| "read before".into());
    format!(
        "the last topology read failed ({error}); planning on the topology {age}, which may be stale; the published assignment is kept and never shrinks because of a failed read"
    )
}

/// When to look again: the source's refresh (sooner after a failed read), or
/// when the next pod finishes `minReadySeconds`, whichever comes first. A
/// Kinesis source's refresh is its own jittered one (so groups do not read
/// in step), else the spec's interval.
fn requeue_after(obs: &Observation) -> Duration {
    let refresh = match &obs.group.spec.source.kinesis {
        Some(kinesis) => obs
            .topology
            .refresh_after
            .unwrap_or_else(|| kinesis.refresh_interval().unwrap_or(DEFAULT_REFRESH)),
        None => STATIC_REFRESH,
    };
    let mut after = if obs.topology.error.is_some() {
        refresh.min(ERROR_RETRY)
    } else {
        refresh
    };
    if let Some(pool) = &obs.pool {
        let min_ready = pool.spec.min_ready();
        for pod in obs
            .pods
            .iter()
            .filter(|p| p.selected && p.ready && p.deletion_timestamp.is_none())
        {
            if let Some(since) = pod.ready_since {
                let due = since
                    .as_millisecond()
                    .saturating_add(i64::try_from(min_ready.as_millis()).unwrap_or(i64::MAX));
                let wait = due - obs.now.as_millisecond();
                if wait > 0 {
                    after = after.min(Duration::from_millis(wait.unsigned_abs()));
                }
            }
        }
    }
    after
}
