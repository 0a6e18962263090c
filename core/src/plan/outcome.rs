//! What a plan reports: the counts, load and bookkeeping it records in the
//! status outcome, the problem naming oversized pod views, and the messages
//! of the Published Event and of a stale topology.

use crate::crds::shard_group::ShardCounts;
use crate::crds::{AssignmentDocument, ShardPhase};
use crate::document;
use crate::engine::{self, PlanOutput, ShardState};
use crate::handoff;
use crate::observation::Observation;
use crate::pacing;
use crate::status::{Outcome, Problem, Waiting};
use crate::topology::Topology;

/// Records in `outcome` what the assignment in place after this plan looks
/// like: epoch, shard counts, load, moves in flight, pods with shards and
/// the topology's read time.
pub(super) fn record_assignment(
    obs: &Observation,
    outcome: &mut Outcome,
    topology: &Topology,
    output: &PlanOutput,
    doc: &AssignmentDocument,
    changed: bool,
) {
    outcome.epoch = doc.epoch;
    outcome.waiting = waiting(doc);
    let mut counts = shard_counts(topology, output);
    counts.held = outcome.waiting.as_ref().map_or(0, |w| w.shards);
    outcome.shards = Some(counts);
    outcome.load = Some(load_range(output));
    outcome.moves_in_flight = moves_in_flight(doc);
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
        outcome.topology_time = obs.topology.read_at;
    }
}

/// The handoff and pacing bookkeeping to store, with this plan's moves
/// logged against the budget.
pub(super) fn protocol_status(
    obs: &Observation,
    pacing: &pacing::Pacing,
    output: &PlanOutput,
    step: &handoff::HandoffResult,
) -> handoff::ProtocolStatus {
    let moved = output.required_moves() + output.optional_moves();
    let (move_log, move_budget_remaining) = pacing.record(moved, obs.now);
    handoff::ProtocolStatus {
        move_log,
        move_budget_remaining,
        last_pod_change: Some(pacing.last_pod_change),
        pod_set_digest: Some(pacing.pod_set_digest.clone()),
        graceful_pods: step.graceful_pods.clone(),
        drain_deliveries: step.drain_deliveries.clone(),
        oldest_revoke: step.oldest_revoke,
        unfenced: obs.group.spec.lease_table.is_none(),
    }
}

/// Names the pods whose view is too large for an annotation in `outcome`'s
/// problem. The other pods still get their views; these pods keep their old
/// annotation, so they must read the ConfigMap to follow along.
pub(super) fn note_oversized(outcome: &mut Outcome, oversized: &[document::Oversized]) {
    let Some(first) = oversized.first() else {
        return;
    };
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

fn shard_counts(topology: &Topology, output: &PlanOutput) -> ShardCounts {
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
        held: 0,
    }
}

/// The shards `doc` holds for returning pods, if any.
fn waiting(doc: &AssignmentDocument) -> Option<Waiting> {
    let mut shards = 0;
    let mut until: Option<jiff::Timestamp> = None;
    let mut pods = std::collections::BTreeSet::new();
    for record in doc.shards.values() {
        let (Some(hold), Some(owner)) = (&record.return_hold, &record.owner) else {
            continue;
        };
        shards += 1;
        until = Some(until.map_or(hold.until, |u| u.min(hold.until)));
        pods.insert(owner.clone());
    }
    Some(Waiting {
        shards,
        until: until?,
        pods: pods.into_iter().collect(),
    })
}

fn load_range(output: &PlanOutput) -> (u64, u64) {
    let min = output.loads.values().copied().min().unwrap_or(0);
    let max = output.loads.values().copied().max().unwrap_or(0);
    (min, max)
}

pub(super) fn moves_in_flight(doc: &AssignmentDocument) -> u64 {
    doc.shards
        .values()
        .filter(|r| r.state == ShardPhase::Revoking)
        .count() as u64
}

pub(super) fn published_message(
    doc: &AssignmentDocument,
    output: &PlanOutput,
    first: bool,
) -> String {
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
pub(super) fn stale_message(obs: &Observation, error: &crate::topology::SourceError) -> String {
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
