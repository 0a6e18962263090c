//! The plan's inputs: the checks that block a plan (invalid spec, missing
//! pool, no topology, no eligible pod), the pool's pods as the engine sees
//! them (eligibility after `minReadySeconds`, capacity, zone), the engine
//! options, and the engine run under the pacing of optional moves.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;

use super::eligible::ready_for;
use crate::conditions::reason;
use crate::crds::shard_group::{BalanceMode, PodCounts, ShardGroupSpec};
use crate::crds::{AssignmentDocument, ConsumerPool};
use crate::engine::{self, Balance, PlanInput, PlanOptions, PlanOutput};
use crate::handoff;
use crate::identity::{self, Identities, Returning};
use crate::observation::{Observation, PodInfo};
use crate::pacing;
use crate::status::{Outcome, Problem};
use crate::topology::Topology;

/// What the engine plans from, once nothing blocks the plan.
pub(super) struct Inputs<'a> {
    /// The group's pool.
    pub(super) pool: &'a ConsumerPool,
    /// The pool's selected pods, as the engine sees them.
    pub(super) pods: Vec<engine::Pod>,
    /// The topology to plan on (the last good one after a failed read).
    pub(super) topology: &'a Topology,
    /// The pods away that their shards wait for (stable identity).
    pub(super) identities: Identities,
}

/// The pool, its pods and the topology to plan on, or the problem that
/// blocks the plan, checked in this order: an invalid spec, a missing pool,
/// no topology yet, no eligible pod. Counts the pool's pods into `outcome`
/// once the pool is known.
pub(super) fn inputs<'a>(
    obs: &'a Observation,
    kept_epoch: u64,
    outcome: &mut Outcome,
) -> Result<Inputs<'a>, Problem> {
    if let Err(error) = check_spec(&obs.group.spec) {
        return Err(Problem {
            reason: reason::INVALID_SPEC,
            message: format!("{error}; fix the ShardGroup spec"),
            blocks_ready: true,
        });
    }
    let Some(pool) = &obs.pool else {
        return Err(Problem {
            reason: reason::POOL_NOT_FOUND,
            message: format!(
                "ConsumerPool {:?} not found in this namespace; create it or fix spec.poolRef.name (the last assignment, epoch {kept_epoch}, stays in place)",
                obs.group.spec.pool_ref.name
            ),
            blocks_ready: true,
        });
    };
    let previous = obs
        .published
        .document()
        .or_else(|| handoff::trusted_memory(obs));
    let identities = identity::identities(
        pool,
        &obs.pods,
        &obs.stateful_sets,
        &obs.departed,
        previous.as_slice(),
        obs.now,
    );
    let pods = engine_pods(&obs.pods, pool, &identities.returning, obs.now);
    outcome.pods = pod_counts(&obs.pods, &pods, &identities.returning);
    let Some(topology) = &obs.topology.last_good else {
        return Err(match &obs.topology.error {
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
        });
    };
    // Pods that are away but waited for are planned on (their shards are
    // revoked and held for them): only a pool with neither blocks.
    if outcome.pods.eligible == 0 && identities.returning.is_empty() {
        return Err(Problem {
            reason: reason::NO_READY_PODS,
            message: format!(
                "ConsumerPool {:?} selects {} pods and none is Ready for minReadySeconds ({}s) without terminating; the last assignment (epoch {kept_epoch}) stays in place",
                obs.group.spec.pool_ref.name, outcome.pods.selected, pool.spec.min_ready_seconds
            ),
            blocks_ready: true,
        });
    }
    Ok(Inputs {
        pool,
        pods,
        topology,
        identities,
    })
}

/// Interprets every duration of the spec, so a stored spec that predates a
/// validation rule is reported instead of guessed at.
fn check_spec(spec: &ShardGroupSpec) -> Result<(), crate::crds::shard_group::SpecError> {
    if let Some(throughput) = &spec.throughput {
        throughput.half_life()?;
        throughput.damping_interval()?;
        throughput.stale_after()?;
    }
    spec.handoff.drain_timeout()?;
    spec.handoff.lease_failover()?;
    spec.rebalance.delay()?;
    spec.rebalance.window()?;
    spec.rebalance.initial_delay()?;
    spec.source.refresh_interval()?;
    Ok(())
}

/// Engine options from the spec and pool.
fn plan_options(obs: &Observation, pool: &ConsumerPool, pacing: &pacing::Pacing) -> PlanOptions {
    let spec = &obs.group.spec;
    PlanOptions {
        consumer_name: obs.group.consumer_name(),
        balance: match spec.balance {
            BalanceMode::Count => Balance::Count,
            BalanceMode::HashRange => Balance::HashRange,
            BalanceMode::Throughput => Balance::Throughput,
        },
        band_percent: super::throughput::by_throughput(spec)
            .then(|| obs.group.throughput_settings().band_percent),
        standbys: spec.standbys,
        max_shards_per_pod: pool.spec.max_shards_per_pod.unwrap_or(0),
        rebalance: pacing.rebalance,
        max_optional_moves: pacing.max_optional_moves,
    }
}

/// The pool's selected pods as engine pods (not-yet-eligible pods are passed
/// as not ready, terminating ones as terminating, so their shards move).
/// Pods that are away and `returning` are passed as eligible, those gone
/// from the API too (with the pool's default capacity), so the engine keeps
/// their shards where they were, and so does the pool's deal; the handoff
/// step then holds those shards for them instead of activating them.
/// Their Ready time counts as unknown (oldest), not as the transition that
/// took them away.
pub(crate) fn engine_pods(
    pods: &[PodInfo],
    pool: &ConsumerPool,
    returning: &BTreeMap<String, Returning>,
    now: Timestamp,
) -> Vec<engine::Pod> {
    let min_ready = pool.spec.min_ready();
    let mut engine_pods: Vec<engine::Pod> = pods
        .iter()
        .filter(|p| p.selected)
        .map(|p| {
            let away = returning.contains_key(&p.name);
            engine::Pod {
                name: p.name.clone(),
                ready: away || ready_for(p, min_ready, now),
                terminating: !away && p.deletion_timestamp.is_some(),
                capacity: pool.spec.capacity.weight_of(&p.labels).max(1),
                zone: p.zone.clone(),
                node: p.node_name.clone(),
                ready_since: if away {
                    None
                } else {
                    p.ready_since.map(|t| t.as_second())
                },
            }
        })
        .collect();
    for name in returning.keys() {
        if !pods.iter().any(|p| p.selected && &p.name == name) {
            engine_pods.push(engine::Pod {
                name: name.clone(),
                ready: true,
                terminating: false,
                capacity: pool.spec.capacity.default.max(1),
                zone: None,
                node: None,
                ready_since: None,
            });
        }
    }
    engine_pods
}

/// The pool's pod counts: selected, and eligible (pods away that are waited
/// for are not).
fn pod_counts(
    all: &[PodInfo],
    pods: &[engine::Pod],
    returning: &BTreeMap<String, Returning>,
) -> PodCounts {
    PodCounts {
        selected: all.iter().filter(|p| p.selected).count() as u64,
        eligible: pods
            .iter()
            .filter(|p| p.ready && !p.terminating && !returning.contains_key(&p.name))
            .count() as u64,
    }
}

/// The engine's plan, and the pacing it ran under.
pub(super) struct Engined {
    /// Whether and how many optional moves were allowed, and the bookkeeping.
    pub(super) pacing: pacing::Pacing,
    /// The engine's assignment.
    pub(super) output: PlanOutput,
    /// What the engine planned from (kept to ask it again without the
    /// rebalance delay: [`super::requeue::rebalances_unpaced`]).
    pub(super) input: PlanInput,
}

/// How the optional moves of a plan on `pods` are paced (the rebalance
/// delay, the move budget, throughput mode's damping), from the group's
/// status and the previous assignment (`previous_doc`).
pub(super) fn pace(
    obs: &Observation,
    pods: &[engine::Pod],
    previous_doc: Option<&AssignmentDocument>,
) -> pacing::Pacing {
    let current = obs.group.status.clone().unwrap_or_default();
    let mut pacing = pacing::pace(
        &obs.group.spec.rebalance,
        current.last_pod_change,
        current.pod_set_digest.as_deref(),
        &current.move_log,
        pods.iter()
            .filter(|p| p.ready && !p.terminating)
            .map(|p| p.name.as_str()),
        obs.now,
    );
    super::throughput::damp(obs, &mut pacing, pods, previous_doc);
    pacing
}

/// Runs the engine on the pods and topology under `pacing`, with the
/// previous assignment as its starting point; a refused input is the
/// problem that blocks the plan.
pub(super) fn run_engine(
    obs: &Observation,
    pool: &ConsumerPool,
    (pods, pacing): (Vec<engine::Pod>, pacing::Pacing),
    topology: &Topology,
    previous: Arc<engine::PreviousAssignment>,
    memory: &mut engine::EngineMemory,
) -> Result<Engined, Problem> {
    let input = PlanInput {
        options: plan_options(obs, pool, &pacing),
        shards: Arc::clone(&topology.shards),
        pods,
        previous,
        loads: super::throughput::engine_loads(obs, topology),
        // The pool's balance: its deal's rows (the ⌈⌉ quotas in count mode
        // only, the standby slots in any mode) and, balanced by throughput,
        // the load of the pool's other throughput groups.
        ceilings: obs
            .pool_share
            .ceilings
            .clone()
            .filter(|_| obs.group.spec.balance.counts_shards()),
        standby_ceilings: obs.pool_share.standby_ceilings.clone(),
        pool_load: if obs.group.spec.balance.weighs_load() {
            obs.pool_share.load.clone()
        } else {
            BTreeMap::new()
        },
    };
    let output = engine::plan_with(&input, memory).map_err(|error| Problem {
        reason: reason::PLAN_FAILED,
        message: format!("the assignment engine refused the input: {error}"),
        blocks_ready: true,
    })?;
    Ok(Engined {
        pacing,
        output,
        input,
    })
}
