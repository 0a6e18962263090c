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

pub use book::{Limits, LoadBook, Rejection, ReportRefusal, Tally};
pub use estimate::{Estimate, MIN_READINGS};

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
            half_life: settings
                .half_life()
                .unwrap_or(std::time::Duration::from_secs(30)),
            max_rate: settings.max_shard_bytes_per_second(),
        }
    }
}

#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod tests;
