//! `balance: throughput` and the scaling signal in the plan step: the
//! engine's weights from the measured estimates, the damping of moves made
//! for load, and what the plan reports of the load (the status's
//! `throughput` and `recommendedReplicas`, the `LoadMeasured` condition and
//! the Events of refused readings and load rebalances).
//!
//! Damping: after optional moves made for load at time T (recorded as
//! `status.throughput.lastRebalance`), the next wait until T +
//! `throughput.dampingInterval`, so no shard moves twice for load within
//! the interval; a change of the eligible pods since T (a scale-up or
//! -down) lifts it, as balancing onto new pods is not a reaction to noise.
//! Confirmation: shards move only once pods have stayed outside the band
//! for [`crate::load::CONFIRM_HALF_LIVES`] half-lives of the smoothing
//! (`status.throughput.outOfBandSince`), so a load that is still rising is
//! not repaired halfway and again after the damping interval.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::conditions::reason;
use crate::crds::shard_group::{ShardGroupSpec, ThroughputStatus};
use crate::engine::{PlanOutput, Pod, Rebalance, ShardLoad, ShardState};
use crate::events::EventNote;
use crate::load::scaling::{Demand, recommended_replicas};
use crate::load::shift_news_after;
use crate::load::{LoadObservation, MIN_READINGS};
use crate::load::{confirmation_wait, damping_wait, engine_load, out_of_band_since, whole};
use crate::observation::Observation;
use crate::pacing::Pacing;
use crate::topology::Topology;
use jiff::Timestamp;
use shardring_crds::assignment::{AssignmentDocument, ShardPhase};

/// How often a group balanced by throughput is planned again without a
/// watch event, at most: loads change without one.
pub(crate) const LOAD_POLL_MAX: Duration = Duration::from_secs(30);
/// How often at least (a shorter half-life asks for more).
pub(crate) const LOAD_POLL_MIN: Duration = Duration::from_secs(5);

/// Whether `spec` balances by throughput.
pub(crate) fn by_throughput(spec: &ShardGroupSpec) -> bool {
    spec.balance.weighs_load()
}

/// The engine's loads: each readable shard's estimate once it has
/// [`MIN_READINGS`] readings (until then the shard weighs the mean), with
/// the shifts that are still news (`crate::load::engine_load`).
pub(super) fn engine_loads(obs: &Observation, topology: &Topology) -> BTreeMap<String, ShardLoad> {
    if !by_throughput(&obs.group.spec) {
        return BTreeMap::new();
    }
    let settings = obs.group.throughput_settings();
    let news_after = shift_news_after(
        stored(obs).and_then(|t| t.last_rebalance),
        settings.damping_interval().unwrap_or_default(),
        settings.half_life().unwrap_or(LOAD_POLL_MAX),
        obs.now,
    );
    topology
        .shards
        .iter()
        .filter(|s| s.state != ShardState::Complete)
        .filter_map(|s| {
            let estimate = obs.loads.estimates.get(&s.id)?;
            Some((s.id.clone(), engine_load(estimate, news_after)?))
        })
        .collect()
}

/// Holds optional moves while the damping interval since the last load
/// rebalance runs (unless the eligible pods changed since), and while pods
/// outside the band wait for confirmation — unless an eligible pod of
/// `pods` holds nothing in `previous_doc` (nor of the pool's other groups)
/// after a pod change no load rebalance has answered yet: its load is
/// exactly 0, no measurement, so a scale-up's new pods take their first
/// shards as soon as `rebalance.delay` allows.
pub(super) fn damp(
    obs: &Observation,
    pacing: &mut Pacing,
    pods: &[Pod],
    previous_doc: Option<&AssignmentDocument>,
) {
    if !by_throughput(&obs.group.spec) || pacing.rebalance == Rebalance::RequiredOnly {
        return;
    }
    let holders: BTreeSet<&str> = previous_doc
        .map(|doc| {
            doc.shards
                .values()
                .filter_map(|record| record.owner.as_deref())
                .collect()
        })
        .unwrap_or_default();
    // In a pool, a pod the other groups fill carries load: it is no new
    // pod, whatever it holds of this group.
    let pool_load = |name: &str| obs.pool_share.load.get(name).map_or(0, |l| l.rate);
    let pod_holds_nothing = pods.iter().any(|p| {
        p.ready && !p.terminating && !holders.contains(p.name.as_str()) && pool_load(&p.name) == 0
    });
    let interval = obs
        .group
        .throughput_settings()
        .damping_interval()
        .unwrap_or_default();
    let half_life = obs
        .group
        .throughput_settings()
        .half_life()
        .unwrap_or(LOAD_POLL_MAX);
    let previous = stored(obs);
    let last_rebalance = last_move(obs, previous_doc);
    let damped = damping_wait(last_rebalance, pacing.last_pod_change, interval, obs.now);
    let new_pod = pod_holds_nothing && last_rebalance.is_none_or(|t| pacing.last_pod_change > t);
    let unconfirmed = if new_pod {
        None
    } else {
        confirmation_wait(
            previous.and_then(|t| t.out_of_band_since),
            half_life,
            obs.now,
        )
    };
    if let Some(wait) = damped.max(unconfirmed) {
        pacing.rebalance = Rebalance::RequiredOnly;
        pacing.next_change = Some(pacing.next_change.map_or(wait, |w| w.min(wait)));
    }
    // Another throughput group of the pool is deciding its load moves:
    // this one waits (it is woken when that one is done) rather than
    // correct the same excess from that group's load before its decision.
    if obs.pool_share.turn_taken_by.is_some() {
        pacing.rebalance = Rebalance::RequiredOnly;
    }
}

/// When shards last moved: the stored `status.throughput.lastRebalance`,
/// or a later revoke still in flight in `previous_doc` (a revoke that holds
/// a shard for its own returning owner is no move). The document is written
/// before the status, so a status write lost after a move (a crash, a
/// failed write) would otherwise forget it, and the shards it moved could
/// move again for load at once.
fn last_move(obs: &Observation, previous_doc: Option<&AssignmentDocument>) -> Option<Timestamp> {
    let revoked = previous_doc.and_then(|doc| {
        doc.shards
            .values()
            .filter(|r| r.state == ShardPhase::Revoking)
            .filter_map(|r| {
                let handoff = r.handoff.as_ref()?;
                let held_for_owner = r.return_hold.is_some() && handoff.to == r.owner;
                (!held_for_owner).then_some(handoff.since)
            })
            .max()
    });
    let stored = stored(obs).and_then(|t| t.last_rebalance);
    stored.max(revoked)
}

/// The stored `status.throughput`.
fn stored(obs: &Observation) -> Option<&ThroughputStatus> {
    obs.group
        .status
        .as_ref()
        .and_then(|s| s.throughput.as_ref())
}

/// When to look again at the latest: a group balanced by throughput is
/// planned again within its half-life (bounded by [`LOAD_POLL_MIN`] and
/// [`LOAD_POLL_MAX`]) so a load shift is seen without a watch event.
pub(super) fn poll(obs: &Observation) -> Option<Duration> {
    by_throughput(&obs.group.spec).then(|| {
        obs.group
            .throughput_settings()
            .half_life()
            .unwrap_or(LOAD_POLL_MAX)
            .clamp(LOAD_POLL_MIN, LOAD_POLL_MAX)
    })
}

/// What a plan reports of the load.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadOutcome {
    /// `status.throughput` (throughput mode only).
    pub status: Option<ThroughputStatus>,
    /// `status.recommendedReplicas` (with `spec.scaling`).
    pub recommended: Option<u32>,
    /// The `LoadMeasured` condition: (status, reason, message).
    pub measured: Option<(bool, &'static str, String)>,
    /// Events: readings refused, shards moved for load.
    pub events: Vec<EventNote>,
}

/// Shards by what is known of their load.
struct Coverage {
    readable: u64,
    measured: u64,
    stale: u64,
    /// Sum of the measured (and stale) rates, bytes per second.
    sum: f64,
}

fn coverage(obs: &Observation, topology: &Topology, pending: &[String]) -> Coverage {
    let stale_after = obs
        .group
        .throughput_settings()
        .stale_after()
        .unwrap_or(Duration::from_secs(120));
    let mut c = Coverage {
        readable: 0,
        measured: 0,
        stale: 0,
        sum: 0.0,
    };
    for shard in topology
        .shards
        .iter()
        .filter(|s| s.state != ShardState::Complete && !pending.contains(&s.id))
    {
        c.readable += 1;
        let Some(estimate) = obs.loads.estimates.get(&shard.id) else {
            continue;
        };
        if estimate.readings < MIN_READINGS {
            continue;
        }
        c.sum += estimate.rate;
        if estimate.is_stale(obs.now, stale_after) {
            c.stale += 1;
        } else {
            c.measured += 1;
        }
    }
    c
}

/// What the plan that produced `output` reports of the load.
pub(super) fn report(
    obs: &Observation,
    topology: &Topology,
    output: &PlanOutput,
    previous_doc: Option<&AssignmentDocument>,
) -> LoadOutcome {
    let spec = &obs.group.spec;
    let throughput = by_throughput(spec);
    if !throughput && spec.scaling.is_none() {
        return LoadOutcome::default();
    }
    let c = coverage(obs, topology, &output.pending);
    let known = c.measured + c.stale;
    let unmeasured = c.readable - known;
    // An unmeasured shard counts as the mean of the measured ones.
    let total = match known {
        0 => 0.0,
        n => c.sum / n as f64 * c.readable as f64,
    };
    let total_kbps = total / 1024.0;
    let recommended = spec.scaling.as_ref().map(|scaling| {
        recommended_replicas(
            scaling,
            Demand {
                shards: c.readable,
                kbps: total_kbps,
            },
        )
    });
    let mut outcome = LoadOutcome {
        recommended,
        ..LoadOutcome::default()
    };
    if !throughput {
        return outcome;
    }
    let previous = stored(obs);
    let report = output.throughput.as_ref();
    let moved = output.optional_moves();
    // Damping counts from any plan that gave shards new owners: the shards
    // of a pod that left, placed by their load, are not moved again for
    // load within the interval (unless the pods change again), as shards
    // moved for load are not.
    let last_rebalance = if moved + output.required_moves() > 0 {
        Some(obs.now)
    } else {
        last_move(obs, previous_doc)
    };
    let out_of_band_since = out_of_band_since(
        previous.and_then(|p| p.out_of_band_since),
        report.is_some_and(|r| r.still_out_of_band > 0),
        moved > 0,
        obs.now,
    );
    let rejected = &obs.loads.rejected;
    let status = ThroughputStatus {
        spread: report
            .and_then(|r| r.spread_permille())
            .map(|(min, max)| format!("{}/{}", ratio(min), ratio(max))),
        total_kbps: whole(total_kbps),
        out_of_band_pods: report.map_or(0, |r| r.still_out_of_band),
        measured_shards: c.measured,
        unmeasured_shards: unmeasured,
        stale_shards: c.stale,
        rejected_reports: rejected.total,
        last_rebalance,
        out_of_band_since,
    };
    let status = within_noise_of(previous, status);
    outcome.measured = Some(measured_condition(obs, &status, &obs.loads));
    // A new leader's book starts at 0: only growth since the status is news.
    let before = previous.map_or(0, |p| p.rejected_reports);
    if rejected.total > before
        && let Some((latest, _)) = &rejected.last
    {
        outcome.events.push(EventNote::warning(
            reason::LOAD_REPORT_REJECTED,
            format!(
                "{} load readings refused since the last look ({}); the latest: {latest}",
                rejected.total - before,
                by_reason(&obs.loads),
            ),
        ));
    }
    if moved > 0 {
        let before = report.map_or(0, |r| r.out_of_band);
        outcome.events.push(EventNote::normal(
            reason::LOAD_REBALANCED,
            format!(
                "moved {moved} shards to bring {before} pods back into the ±{}% band; load per pod ÷ fair share now {}",
                obs.group.throughput_settings().band_percent,
                status.spread.as_deref().unwrap_or("-"),
            ),
        ));
    }
    outcome.status = Some(status);
    outcome
}

/// The `LoadMeasured` condition: refused readings (within `staleAfter`),
/// unmeasured shards, stale ones, or all measured.
fn measured_condition(
    obs: &Observation,
    status: &ThroughputStatus,
    loads: &LoadObservation,
) -> (bool, &'static str, String) {
    let settings = obs.group.throughput_settings();
    let stale_after = settings.stale_after().unwrap_or(Duration::from_secs(120));
    let recent =
        loads.rejected.last.as_ref().filter(|(_, at)| {
            obs.now.duration_since(*at).as_secs_f64() <= stale_after.as_secs_f64()
        });
    if let Some((latest, _)) = recent {
        return (
            false,
            reason::LOAD_REPORTS_REJECTED,
            format!(
                "{} load readings refused ({}); they change nothing. The latest: {latest}",
                loads.rejected.total,
                by_reason(loads)
            ),
        );
    }
    let readable = status.measured_shards + status.stale_shards + status.unmeasured_shards;
    if status.unmeasured_shards > 0 {
        return (
            false,
            reason::LOAD_UNMEASURED,
            format!(
                "{} of {readable} readable shards have no load measurement yet and weigh the mean of the measured ones; \
                 consumers report through the endpoint (POST .../loads), or KCL 3.x workers write throughputKBps to the lease table",
                status.unmeasured_shards
            ),
        );
    }
    if status.stale_shards > 0 {
        return (
            false,
            reason::LOAD_STALE,
            format!(
                "{} of {readable} readable shards were last measured more than {} ago and keep their last value",
                status.stale_shards, settings.stale_after
            ),
        );
    }
    (
        true,
        reason::MEASURED,
        format!(
            "every readable shard's load was measured within {}",
            settings.stale_after
        ),
    )
}

fn by_reason(loads: &LoadObservation) -> String {
    loads
        .rejected
        .by_reason
        .iter()
        .map(|(reason, n)| format!("{reason}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How far the measured total may drift from the stored one, in parts of
/// it, before the status says so: estimates move a little at every load
/// poll, and a group at rest would otherwise write its status at each.
const TOTAL_NOISE: f64 = 0.05;
/// How far either end of the spread may drift from the stored one.
const SPREAD_NOISE: f64 = 0.03;

/// `status`, with the total and the spread the stored status shows kept
/// where the new figures differ from them by no more than measurement
/// noise ([`TOTAL_NOISE`], [`SPREAD_NOISE`]): a group whose load is steady
/// writes no status at rest. Counts, times and the band's verdict are
/// never kept: they are what the protocol and alerts act on.
fn within_noise_of(
    stored: Option<&ThroughputStatus>,
    mut status: ThroughputStatus,
) -> ThroughputStatus {
    let Some(stored) = stored else {
        return status;
    };
    let drift = stored.total_kbps.abs_diff(status.total_kbps) as f64;
    if drift <= stored.total_kbps as f64 * TOTAL_NOISE {
        status.total_kbps = stored.total_kbps;
    }
    let ends = |spread: &Option<String>| -> Option<(f64, f64)> {
        let (min, max) = spread.as_deref()?.split_once('/')?;
        Some((min.parse().ok()?, max.parse().ok()?))
    };
    if let (Some(old), Some(new)) = (ends(&stored.spread), ends(&status.spread))
        && (old.0 - new.0).abs() <= SPREAD_NOISE + f64::EPSILON
        && (old.1 - new.1).abs() <= SPREAD_NOISE + f64::EPSILON
    {
        status.spread.clone_from(&stored.spread);
    }
    status
}

/// Thousandths as a ratio with two decimals (`1000` → `1.00`).
fn ratio(permille: u64) -> String {
    let hundredths = permille.saturating_add(5) / 10;
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

#[cfg(test)]
mod tests {
    use super::{ThroughputStatus, ratio, within_noise_of};

    fn status(total_kbps: u64, spread: &str) -> ThroughputStatus {
        ThroughputStatus {
            total_kbps,
            spread: Some(spread.into()),
            ..Default::default()
        }
    }

    #[test]
    fn figures_within_noise_keep_the_stored_ones() {
        let stored = status(1000, "0.95/1.05");
        let kept = within_noise_of(Some(&stored), status(1049, "0.97/1.02"));
        assert_eq!(kept.total_kbps, 1000);
        assert_eq!(kept.spread.as_deref(), Some("0.95/1.05"));
        assert_eq!(kept, stored, "nothing to write at rest");
    }

    #[test]
    fn figures_beyond_noise_are_reported() {
        let stored = status(1000, "0.95/1.05");
        let moved = within_noise_of(Some(&stored), status(1051, "0.95/1.09"));
        assert_eq!(moved.total_kbps, 1051);
        assert_eq!(moved.spread.as_deref(), Some("0.95/1.09"));
        // Everything else is reported as measured, noise or not.
        let mut counts = status(1000, "0.95/1.05");
        counts.out_of_band_pods = 1;
        counts.measured_shards = 7;
        let kept = within_noise_of(Some(&stored), counts.clone());
        assert_eq!(kept, counts);
        // Nothing stored: the figures as measured.
        assert_eq!(within_noise_of(None, status(3, "1.00/1.00")).total_kbps, 3);
    }

    #[test]
    fn ratios_print_with_two_decimals() {
        assert_eq!(ratio(1000), "1.00");
        assert_eq!(ratio(954), "0.95");
        assert_eq!(ratio(1076), "1.08");
        assert_eq!(ratio(99), "0.10");
    }
}
