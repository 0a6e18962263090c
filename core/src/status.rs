//! Builds the ShardGroup status from a plan's outcome: counts, load, epoch,
//! the four conditions and the Events their transitions call for. Pure: the
//! time comes from the observation, and an unchanged outcome yields a status
//! equal to the current one (so nothing is written).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{
    self, BALANCED, DEGRADED, LOAD_MEASURED, ORDERING_NOT_ENFORCED, ORDERING_NOT_ENFORCED_MESSAGE,
    PROGRESSING, READY, reason,
};
use crate::crds::ShardGroupStatus;
use crate::crds::shard_group::{HandoffRecord, PodCounts, RECENT_HANDOFFS, ShardCounts};
use crate::events::EventNote;
use crate::handoff::{self, HANDOFF_UNFENCED, ProtocolStatus};
use crate::observation::Observation;

/// Something that keeps the group from its desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// Constant reason.
    pub reason: &'static str,
    /// What is wrong and what to do.
    pub message: String,
    /// Whether the published assignment is no longer current (Ready=False).
    /// A stale topology read keeps Ready but degrades.
    pub blocks_ready: bool,
}

/// What the plan step learned, from which status is built.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// Epoch of the document in place after this reconcile.
    pub epoch: u64,
    /// Shard counts, `None` to keep the current ones (no plan was made).
    pub shards: Option<ShardCounts>,
    /// Fewest and most shards on one eligible pod, `None` to keep the current ones.
    pub load: Option<(u64, u64)>,
    /// Pod counts.
    pub pods: PodCounts,
    /// Shards in `Revoking`.
    pub moves_in_flight: u64,
    /// The problem, if any.
    pub problem: Option<Problem>,
    /// Pods that received shards in the published document.
    pub pods_with_shards: u64,
    /// When the current topology was read, if known.
    pub topology_time: Option<Timestamp>,
    /// Handoff and pacing bookkeeping, `None` to keep the current one (no
    /// plan was made).
    pub protocol: Option<ProtocolStatus>,
    /// Why the group's first publish is held (`rebalance.initialDelay`):
    /// not Ready yet, but nothing is wrong.
    pub held: Option<String>,
    /// What the plan reports of the measured load, `None` to keep the
    /// current one (no plan was made).
    pub measured_load: Option<crate::plan::throughput::LoadOutcome>,
    /// Shards held for pods that may return, in the document in place.
    pub waiting: Option<Waiting>,
    /// Optional moves the move budget held back in this plan.
    pub deferred_moves: u64,
    /// Handoffs completed in this plan (`status.recentHandoffs`).
    pub completed: Vec<handoff::Completed>,
}

/// Shards held for returning pods (stable identity), as the document in
/// place shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// How many.
    pub shards: u64,
    /// The earliest end of their holds.
    pub until: Timestamp,
    /// The pods they wait for, sorted.
    pub pods: Vec<String>,
}

/// The status for `outcome`, and the Events its condition transitions call for.
pub(crate) fn build(obs: &Observation, outcome: &Outcome) -> (ShardGroupStatus, Vec<EventNote>) {
    let current = obs.group.status.clone().unwrap_or_default();
    let generation = obs.group.metadata.generation;
    let now = obs.now;
    let previous = current.conditions.as_slice();
    let shards = outcome
        .shards
        .clone()
        .unwrap_or_else(|| current.shards.clone());
    let (min_load, max_load) = outcome.load.unwrap_or((current.min_load, current.max_load));
    let planned = outcome.shards.is_some();
    let problem = outcome.problem.as_ref();

    let ready = match (problem.filter(|p| p.blocks_ready), &outcome.held) {
        (Some(p), _) => conditions::condition(
            READY,
            false,
            p.reason,
            p.message.clone(),
            generation,
            now,
            previous,
        ),
        (None, Some(held)) => conditions::condition(
            READY,
            false,
            reason::FIRST_PUBLISH_HELD,
            held.clone(),
            generation,
            now,
            previous,
        ),
        (None, None) => conditions::condition(
            READY,
            true,
            reason::PUBLISHED,
            format!(
                "epoch {} publishes {} shards on {} pods",
                outcome.epoch,
                shards.total - shards.unassigned,
                outcome.pods_with_shards
            ),
            generation,
            now,
            previous,
        ),
    };
    let balanced = if !planned {
        conditions::condition(
            BALANCED,
            false,
            reason::NOT_PLANNED,
            "no plan was made; see the Ready condition".into(),
            generation,
            now,
            previous,
        )
    } else if shards.unassigned > 0 {
        conditions::condition(
            BALANCED,
            false,
            reason::UNASSIGNED_SHARDS,
            format!(
                "{} readable shards have no owner: every eligible pod is at maxShardsPerPod; add pods or raise the cap",
                shards.unassigned
            ),
            generation,
            now,
            previous,
        )
    } else if let Some(out) = outcome
        .measured_load
        .as_ref()
        .and_then(|l| l.status.as_ref())
        .filter(|t| t.out_of_band_pods > 0)
    {
        conditions::condition(
            BALANCED,
            false,
            reason::OUT_OF_BAND,
            format!(
                "{} pods are outside the ±{}% band around their fair share (load ÷ fair share {}); \
                 the moves allowed now (throughput.dampingInterval since the last load rebalance, \
                 the move budget, the rebalance delay, maxShardsPerPod) cannot bring them back",
                out.out_of_band_pods,
                obs.group.throughput_settings().band_percent,
                out.spread.as_deref().unwrap_or("-")
            ),
            generation,
            now,
            previous,
        )
    } else if outcome.deferred_moves > 0 {
        conditions::condition(
            BALANCED,
            false,
            reason::MOVES_DEFERRED,
            format!(
                "{} optional moves wait for the move budget (rebalance.maxMovesPerWindow: {} per window {}); \
                 the window allows more as earlier moves leave it",
                outcome.deferred_moves,
                obs.group
                    .spec
                    .rebalance
                    .max_moves_per_window
                    .unwrap_or_default(),
                obs.group.spec.rebalance.window,
            ),
            generation,
            now,
            previous,
        )
    } else {
        let spread = outcome
            .measured_load
            .as_ref()
            .and_then(|l| l.status.as_ref())
            .and_then(|t| t.spread.as_deref())
            .map(|s| format!("; load ÷ fair share {s}"))
            .unwrap_or_default();
        conditions::condition(
            BALANCED,
            true,
            reason::BALANCED,
            format!("load per pod is {min_load}/{max_load} (min/max){spread}"),
            generation,
            now,
            previous,
        )
    };
    let unfenced = outcome.protocol.as_ref().is_some_and(|p| p.unfenced);
    let progressing = if let Some(held) = &outcome.held {
        conditions::condition(
            PROGRESSING,
            true,
            reason::FIRST_PUBLISH_HELD,
            held.clone(),
            generation,
            now,
            previous,
        )
    } else if outcome.moves_in_flight > 0 && unfenced {
        conditions::condition(
            PROGRESSING,
            true,
            HANDOFF_UNFENCED,
            format!(
                "{} shards are being handed over without a lease table: a revoked pod is trusted to stop within handoff.drainTimeout; set spec.leaseTable to fence handoffs",
                outcome.moves_in_flight
            ),
            generation,
            now,
            previous,
        )
    } else if outcome.moves_in_flight > 0 {
        conditions::condition(
            PROGRESSING,
            true,
            reason::HANDOFF_IN_PROGRESS,
            format!("{} shards are being handed over", outcome.moves_in_flight),
            generation,
            now,
            previous,
        )
    } else if let Some(waiting) = &outcome.waiting {
        conditions::condition(
            PROGRESSING,
            true,
            reason::WAITING_FOR_RETURN,
            format!(
                "{} shards are held, unread, for {} to return (ConsumerPool identity); they move to other pods at {} unless it is back",
                waiting.shards,
                waiting.pods.join(", "),
                waiting.until
            ),
            generation,
            now,
            previous,
        )
    } else {
        conditions::condition(
            PROGRESSING,
            false,
            reason::STABLE,
            "no shard is being handed over".into(),
            generation,
            now,
            previous,
        )
    };
    let degraded = match problem {
        Some(p) => conditions::condition(
            DEGRADED,
            true,
            p.reason,
            p.message.clone(),
            generation,
            now,
            previous,
        ),
        None => conditions::condition(
            DEGRADED,
            false,
            reason::AS_EXPECTED,
            "no problem".into(),
            generation,
            now,
            previous,
        ),
    };

    let mut conditions = vec![ready, balanced, progressing, degraded];
    conditions.extend(ordering_condition(obs, generation, previous));
    let load_measured = match outcome.measured_load.as_ref() {
        Some(load) => load.measured.clone(),
        // No plan was made: keep what the last one said.
        None => conditions::find(previous, LOAD_MEASURED)
            .filter(|_| crate::plan::throughput::by_throughput(&obs.group.spec))
            .map(|c| (c.status == "True", reason_of(&c.reason), c.message.clone())),
    };
    if let Some((status, why, message)) = load_measured {
        conditions.push(conditions::condition(
            LOAD_MEASURED,
            status,
            why,
            message,
            generation,
            now,
            previous,
        ));
    }

    let mut events = transition_events(previous, problem);
    if let Some(load) = &outcome.measured_load {
        events.extend(load.events.iter().cloned());
    }
    let protocol = outcome
        .protocol
        .clone()
        .unwrap_or_else(|| ProtocolStatus::from_status(&current));
    let status = ShardGroupStatus {
        observed_generation: generation,
        epoch: outcome.epoch,
        source: Some(obs.topology.source.clone())
            .filter(|s| !s.is_empty())
            .or(current.source.clone()),
        shards,
        pods: outcome.pods.clone(),
        load: Some(format!("{min_load}/{max_load}")),
        min_load,
        max_load,
        moves_in_flight: outcome.moves_in_flight,
        move_log: protocol.move_log,
        move_budget_remaining: protocol.move_budget_remaining,
        last_pod_change: protocol.last_pod_change,
        pod_set_digest: protocol.pod_set_digest,
        graceful_pods: protocol.graceful_pods,
        drain_started: protocol
            .drain_deliveries
            .iter()
            .filter_map(|(pod, list)| Some((pod.clone(), *list.last()?)))
            .collect(),
        drain_deliveries: protocol.drain_deliveries,
        oldest_revoke: protocol.oldest_revoke,
        last_topology_time: outcome.topology_time.or(current.last_topology_time),
        held_until: if planned {
            outcome.waiting.as_ref().map(|w| w.until)
        } else {
            current.held_until
        },
        throughput: match &outcome.measured_load {
            Some(load) => load.status.clone(),
            None => current.throughput.clone(),
        },
        recommended_replicas: match &outcome.measured_load {
            Some(load) => load.recommended,
            None => current.recommended_replicas,
        },
        pool_balance: if planned {
            obs.pool_share.balance.clone()
        } else {
            current.pool_balance.clone()
        },
        recent_handoffs: recent_handoffs(&outcome.completed, &current.recent_handoffs, obs.now),
        conditions,
    };
    (status, events)
}

/// The handoffs `completed` now before the `kept` ones, newest first, at
/// most [`RECENT_HANDOFFS`] (the shard order within one reconcile).
fn recent_handoffs(
    completed: &[handoff::Completed],
    kept: &[HandoffRecord],
    now: Timestamp,
) -> Vec<HandoffRecord> {
    completed
        .iter()
        .map(|c| HandoffRecord {
            shard: c.shard.clone(),
            from: c.from.clone(),
            to: c.to.clone(),
            evidence: c.evidence.label().to_owned(),
            millis: u64::try_from(c.duration.as_millis()).unwrap_or(u64::MAX),
            completed: now,
        })
        .chain(kept.iter().cloned())
        .take(RECENT_HANDOFFS)
        .collect()
}

/// `OrderingNotEnforced` for sources with lineage: True (how to enable
/// ordering) without a lease table, False with one; absent for sources
/// without lineage.
fn ordering_condition(
    obs: &Observation,
    generation: Option<i64>,
    previous: &[Condition],
) -> Option<Condition> {
    let enforced = obs.topology.ordering_enforced?;
    Some(if enforced {
        conditions::condition(
            ORDERING_NOT_ENFORCED,
            false,
            reason::LEASE_TABLE_CONFIGURED,
            "children of split or merged shards wait until the lease table shows their parents complete".into(),
            generation,
            obs.now,
            previous,
        )
    } else {
        conditions::condition(
            ORDERING_NOT_ENFORCED,
            true,
            reason::NO_LEASE_TABLE,
            ORDERING_NOT_ENFORCED_MESSAGE.into(),
            generation,
            obs.now,
            previous,
        )
    })
}

/// The constant reason of a stored `LoadMeasured` condition (one written by
/// an older version reads as unmeasured).
fn reason_of(stored: &str) -> &'static str {
    [
        reason::MEASURED,
        reason::LOAD_UNMEASURED,
        reason::LOAD_STALE,
        reason::LOAD_REPORTS_REJECTED,
    ]
    .into_iter()
    .find(|r| *r == stored)
    .unwrap_or(reason::LOAD_UNMEASURED)
}

/// Warning when Degraded turns true or changes reason; Normal when it clears.
fn transition_events(previous: &[Condition], problem: Option<&Problem>) -> Vec<EventNote> {
    let was = conditions::find(previous, DEGRADED).filter(|c| c.status == "True");
    match (was, problem) {
        (Some(c), Some(p)) if c.reason == p.reason => Vec::new(),
        (_, Some(p)) => vec![EventNote::warning(p.reason, p.message.clone())],
        (Some(c), None) => vec![EventNote::normal(
            reason::RECOVERED,
            format!("recovered from {}", c.reason),
        )],
        (None, None) => Vec::new(),
    }
}
