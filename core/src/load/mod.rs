//! Measured load, for `balance: throughput` and the scaling signal: each
//! shard's smoothed estimate ([`estimate`]), the per-group book that checks
//! and smooths readings from consumer reports and the KCL lease table
//! ([`book`]), what the plan step sees of it ([`LoadObservation`]), and the
//! recommended replica count ([`scaling`]). How the plan step turns the
//! estimates into engine weights, damps moves and reports the load is
//! `plan/throughput.rs`.

pub mod book;
pub mod estimate;
pub mod scaling;

use std::collections::BTreeMap;

pub use book::{Limits, LoadBook, Recorded, Rejection, ReportRefusal, Tally};
pub use estimate::{Estimate, MIN_READINGS};

use std::time::Duration;

use jiff::Timestamp;

use crate::engine::ShardLoad;

/// Whether a group with `spec` uses measured loads: balanced by
/// throughput, or scaled by a load per pod.
pub fn uses_loads(spec: &crate::crds::shard_group::ShardGroupSpec) -> bool {
    spec.balance == crate::crds::shard_group::BalanceMode::Throughput
        || spec
            .scaling
            .as_ref()
            .is_some_and(|s| s.target_kbps_per_pod.is_some())
}

/// What the engine weighs a shard by: its estimate once it has
/// [`MIN_READINGS`] readings (until then the shard weighs the mean).
pub fn engine_load(estimate: &Estimate) -> Option<ShardLoad> {
    estimate.is_measured().then(|| ShardLoad {
        rate: whole(estimate.rate),
        noise: whole(estimate.noise()),
    })
}

/// Half-lives of the smoothing a pod must stay outside the band before
/// shards move for it: by then the estimate has taken in seven eighths of
/// a step change in load, so a repair is planned on (nearly) the new load
/// and not on the way there.
pub const CONFIRM_HALF_LIVES: u32 = 3;

/// Confirmation: how long optional moves must still wait at `now` for pods
/// seen outside the band since `out_of_band_since` (`None`: not seen yet,
/// the whole confirmation).
pub fn confirmation_wait(
    out_of_band_since: Option<Timestamp>,
    half_life: Duration,
    now: Timestamp,
) -> Option<Duration> {
    let confirm = half_life * CONFIRM_HALF_LIVES;
    let Some(since) = out_of_band_since else {
        return Some(confirm);
    };
    let end = jiff::SignedDuration::try_from(confirm)
        .ok()
        .and_then(|d| since.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX);
    (now < end).then(|| end.duration_since(now).unsigned_abs())
}

/// Since when pods are outside the band, after a plan that left `outside`
/// pods outside and `moved` shards for load: the confirmation runs on from
/// when they were first seen, restarting after a rebalance, and ends when
/// every pod is inside.
pub fn out_of_band_since(
    previous: Option<Timestamp>,
    outside: bool,
    moved: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    match previous {
        Some(since) if outside && !moved => Some(since),
        _ if outside => Some(now),
        _ => None,
    }
}

/// Damping: how long optional moves must still wait at `now` after the
/// last load rebalance (`None`: they may move). The eligible pods changing
/// after that rebalance (`last_pod_change`) lifts the wait: balancing onto
/// new pods is not a reaction to noise.
pub fn damping_wait(
    last_rebalance: Option<Timestamp>,
    last_pod_change: Timestamp,
    interval: Duration,
    now: Timestamp,
) -> Option<Duration> {
    let last = last_rebalance?;
    if last_pod_change > last {
        return None;
    }
    let end = jiff::SignedDuration::try_from(interval)
        .ok()
        .and_then(|d| last.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX);
    (now < end).then(|| end.duration_since(now).unsigned_abs())
}

/// A non-negative quantity rounded to a whole number (saturating; 0 for
/// a non-number).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to u64's range first
pub(crate) fn whole(x: f64) -> u64 {
    if x.is_nan() {
        return 0;
    }
    x.round().clamp(0.0, u64::MAX as f64) as u64
}

/// What the plan step sees of a group's measured load.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadObservation {
    /// Shard id → its smoothed estimate (shards never read have none).
    pub estimates: BTreeMap<String, Estimate>,
    /// Readings refused so far.
    pub rejected: Tally,
}

impl LoadObservation {
    /// The limits of `group`'s spec (its durations were checked valid).
    pub fn limits(group: &crate::crds::ShardGroup) -> Limits {
        let settings = group.throughput_settings();
        Limits {
            half_life: settings.half_life().unwrap_or(Duration::from_secs(30)),
            max_rate: settings.max_shard_bytes_per_second(),
        }
    }
}

#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod tests;
