//! One group's load book: the smoothed estimate of every shard, fed by the
//! consumers' reports and by the KCL lease table's `throughputKBps`, after
//! checking each reading. The operator keeps one per group in its endpoint
//! (the report route writes to it, the observe step reads it); the
//! simulation keeps one beside its operator. Pure: time is an argument.
//!
//! A reading is refused, and changes nothing, when it is not a number or
//! negative ([`Rejection::InvalidLoad`]), above the group's `maxShardKBps`
//! ([`Rejection::AbsurdLoad`]), about a shard the published document does
//! not have ([`Rejection::UnknownShard`]: a typo, a shard of another group,
//! one dropped since) or that the reporting pod does not own in it
//! ([`Rejection::NotOwner`]), or sent from a view
//! older than the pod's ownership of the shard ([`Rejection::StaleReport`]:
//! a report held back across a move). A whole report naming an epoch no
//! document has had yet is refused ([`ReportRefusal::FutureEpoch`]). A lease
//! row's `throughputKBps` is read once per renewal (a new `leaseCounter`):
//! a row whose counter does not move is not being renewed, and its value is
//! not a new reading. Every refusal is counted by reason ([`Tally`]).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use shardring_crds::assignment::{AssignmentDocument, ShardPhase};
use shardring_crds::endpoint::{
    LoadReport, LoadReportResponse, MAX_REPORTED_SHARDS, RejectedRate, ShardRate,
};

use super::estimate::Estimate;
use crate::leases::LeaseTable;

/// How readings are judged and smoothed (from the group's spec).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The smoothing's half-life.
    pub half_life: Duration,
    /// Largest believable bytes per second of one shard.
    pub max_rate: f64,
}

/// Why one reading was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejection {
    /// Negative, infinite or not a number.
    #[error("shard {shard}: {what} {value} is not a load (negative, infinite or not a number)")]
    InvalidLoad {
        /// The shard.
        shard: String,
        /// Which value (`bytesPerSecond`, `recordsPerSecond`, `throughputKBps`).
        what: &'static str,
        /// The value.
        value: f64,
    },
    /// Above the group's `throughput.maxShardKBps`.
    #[error(
        "shard {shard}: {value} bytes/s is above throughput.maxShardKBps ({max} bytes/s): \
         refused as absurd; raise maxShardKBps if the shard really carries that much"
    )]
    AbsurdLoad {
        /// The shard.
        shard: String,
        /// The value, bytes per second.
        value: f64,
        /// The limit, bytes per second.
        max: f64,
    },
    /// The published document has no such shard.
    #[error(
        "shard {shard} is not a shard of this group (its published document, epoch {epoch}, \
         does not have it): report only shards your view lists as active, under their ids"
    )]
    UnknownShard {
        /// The shard.
        shard: String,
        /// The published document's epoch.
        epoch: u64,
    },
    /// The shard is not the reporting pod's in the published document.
    #[error(
        "shard {shard} is not owned by pod {pod} (owner: {owner}): report only shards your view lists as active"
    )]
    NotOwner {
        /// The shard.
        shard: String,
        /// The reporting pod.
        pod: String,
        /// Its owner in the published document (`none` when unassigned).
        owner: String,
    },
    /// The report's view predates the pod's ownership of the shard.
    #[error(
        "shard {shard}: the report names epoch {epoch}, before pod {pod} got the shard \
         (epoch {since}): a measurement from an older view is not about this ownership"
    )]
    StaleReport {
        /// The shard.
        shard: String,
        /// The reporting pod.
        pod: String,
        /// The epoch the report names.
        epoch: u64,
        /// The epoch at which the pod got the shard.
        since: u64,
    },
}

impl Rejection {
    /// Constant reason (the `reason` of a [`RejectedRate`], the Event's
    /// message and the metric's `reason` label).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidLoad { .. } => "InvalidLoad",
            Self::AbsurdLoad { .. } => "AbsurdLoad",
            Self::UnknownShard { .. } => "UnknownShard",
            Self::NotOwner { .. } => "NotOwner",
            Self::StaleReport { .. } => "StaleReport",
        }
    }

    /// The shard it is about.
    pub fn shard(&self) -> &str {
        match self {
            Self::InvalidLoad { shard, .. }
            | Self::AbsurdLoad { shard, .. }
            | Self::UnknownShard { shard, .. }
            | Self::NotOwner { shard, .. }
            | Self::StaleReport { shard, .. } => shard,
        }
    }
}

/// Why a whole report was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportRefusal {
    /// The report names an epoch newer than the published document's.
    #[error(
        "the report names epoch {epoch}, newer than the published document (epoch {published}): \
         send the epoch of your newest view"
    )]
    FutureEpoch {
        /// The epoch sent.
        epoch: u64,
        /// The published epoch.
        published: u64,
    },
    /// More shards than one report may carry.
    #[error("the report carries {0} shards; send at most {MAX_REPORTED_SHARDS} per report")]
    TooManyShards(usize),
}

impl ReportRefusal {
    /// Constant reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::FutureEpoch { .. } => "FutureEpoch",
            Self::TooManyShards(_) => "TooManyShards",
        }
    }
}

/// Refused readings, counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Refused readings since the book began.
    pub total: u64,
    /// By reason.
    pub by_reason: BTreeMap<&'static str, u64>,
    /// The latest refusal and when it happened.
    pub last: Option<(Rejection, Timestamp)>,
}

impl Tally {
    fn count(&mut self, rejection: Rejection, at: Timestamp) {
        self.total += 1;
        *self.by_reason.entry(rejection.reason()).or_default() += 1;
        self.last = Some((rejection, at));
    }
}

/// What became of one report's rates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    /// Rates recorded.
    pub accepted: u32,
    /// Rates refused.
    pub rejected: Vec<Rejection>,
}

impl Recorded {
    /// The answer to the report.
    pub fn response(&self) -> LoadReportResponse {
        LoadReportResponse {
            accepted: self.accepted,
            rejected: self
                .rejected
                .iter()
                .map(|r| RejectedRate {
                    shard: r.shard().to_owned(),
                    reason: r.reason().to_owned(),
                    message: r.to_string(),
                })
                .collect(),
        }
    }
}

/// Who owns a shard of the published document (None: nobody reads it:
/// pending, held or complete), since which epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ownership {
    pod: Option<String>,
    since: u64,
}

/// One group's estimates and what was refused.
#[derive(Debug, Clone, Default)]
pub struct LoadBook {
    estimates: BTreeMap<String, Estimate>,
    owners: BTreeMap<String, Ownership>,
    /// The published document's epoch.
    epoch: u64,
    /// Whether a document was synced before (the first sync cannot tell
    /// since when each owner holds its shard).
    synced: bool,
    /// The lease counter of the latest lease-table reading per shard.
    lease_counters: BTreeMap<String, u64>,
    tally: Tally,
}

impl LoadBook {
    /// Takes the owners of the document the cycle left published. An owner
    /// that changed since the last sync holds its shard since this epoch.
    /// Estimates of shards no longer in the document are dropped.
    pub fn sync(&mut self, document: Option<&AssignmentDocument>) {
        let Some(doc) = document else {
            self.epoch = 0;
            self.owners.clear();
            return;
        };
        let since = if self.synced { doc.epoch } else { 0 };
        let mut owners = BTreeMap::new();
        for (id, record) in &doc.shards {
            let pod = record
                .owner
                .clone()
                .filter(|_| matches!(record.state, ShardPhase::Active | ShardPhase::Revoking));
            let kept = self
                .owners
                .get(id)
                .filter(|o| pod.is_some() && o.pod == pod)
                .map_or(since, |o| o.since);
            owners.insert(id.clone(), Ownership { pod, since: kept });
        }
        self.owners = owners;
        self.estimates.retain(|id, _| doc.shards.contains_key(id));
        self.lease_counters
            .retain(|id, _| doc.shards.contains_key(id));
        self.epoch = doc.epoch;
        self.synced = true;
    }

    /// Records `report` from pod `pod` at `now`: each rate is checked and,
    /// if sound, smoothed into its shard's estimate. Returns how many were
    /// recorded and why the others were refused, or the refusal of the
    /// whole report.
    pub fn report(
        &mut self,
        pod: &str,
        report: &LoadReport,
        limits: &Limits,
        now: Timestamp,
    ) -> Result<Recorded, ReportRefusal> {
        if report.shards.len() > MAX_REPORTED_SHARDS {
            return Err(ReportRefusal::TooManyShards(report.shards.len()));
        }
        if report.epoch > self.epoch {
            return Err(ReportRefusal::FutureEpoch {
                epoch: report.epoch,
                published: self.epoch,
            });
        }
        let mut recorded = Recorded::default();
        for rate in &report.shards {
            match self.check(pod, report.epoch, rate, limits) {
                Ok(()) => {
                    self.take(
                        &rate.shard,
                        rate.bytes_per_second,
                        rate.records_per_second,
                        limits,
                        now,
                    );
                    recorded.accepted += 1;
                }
                Err(rejection) => {
                    recorded.rejected.push(rejection.clone());
                    self.tally.count(rejection, now);
                }
            }
        }
        Ok(recorded)
    }

    fn check(
        &self,
        pod: &str,
        epoch: u64,
        rate: &ShardRate,
        limits: &Limits,
    ) -> Result<(), Rejection> {
        let shard = &rate.shard;
        let Some(owner) = self.owners.get(shard) else {
            return Err(Rejection::UnknownShard {
                shard: shard.clone(),
                epoch: self.epoch,
            });
        };
        if owner.pod.as_deref() != Some(pod) {
            return Err(Rejection::NotOwner {
                shard: shard.clone(),
                pod: pod.to_owned(),
                owner: owner.pod.clone().unwrap_or_else(|| "none".to_owned()),
            });
        }
        if epoch < owner.since {
            return Err(Rejection::StaleReport {
                shard: shard.clone(),
                pod: pod.to_owned(),
                epoch,
                since: owner.since,
            });
        }
        for (what, value) in [
            ("bytesPerSecond", rate.bytes_per_second),
            ("recordsPerSecond", rate.records_per_second),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(Rejection::InvalidLoad {
                    shard: shard.clone(),
                    what,
                    value,
                });
            }
        }
        sound_rate(shard, rate.bytes_per_second, limits)
    }

    fn take(&mut self, shard: &str, bytes: f64, records: f64, limits: &Limits, now: Timestamp) {
        match self.estimates.get_mut(shard) {
            Some(estimate) => estimate.update(bytes, records, now, limits.half_life),
            None => {
                self.estimates
                    .insert(shard.to_owned(), Estimate::first(bytes, records, now));
            }
        }
    }

    /// Reads the `throughputKBps` of each lease renewed since the last
    /// reading (a KCL 3.x worker writes it with every renewal), for the
    /// shards of the published document; returns how many were taken.
    pub fn lease_readings(&mut self, table: &LeaseTable, limits: &Limits, now: Timestamp) -> u64 {
        let mut taken = 0;
        for (id, lease) in &table.leases {
            let Some(kbps) = lease.throughput_kbps else {
                continue;
            };
            // Leases of shards the document does not have (closed and
            // dropped, or another application's) or nobody reads are not
            // this group's load.
            if self.owners.get(id).is_none_or(|o| o.pod.is_none()) {
                continue;
            }
            if self.lease_counters.get(id) == Some(&lease.counter) {
                continue;
            }
            self.lease_counters.insert(id.clone(), lease.counter);
            let bytes = kbps * 1024.0;
            let checked = if !kbps.is_finite() || kbps < 0.0 {
                Err(Rejection::InvalidLoad {
                    shard: id.clone(),
                    what: "throughputKBps",
                    value: kbps,
                })
            } else {
                sound_rate(id, bytes, limits)
            };
            match checked {
                Ok(()) => {
                    self.take(id, bytes, 0.0, limits, now);
                    taken += 1;
                }
                Err(rejection) => self.tally.count(rejection, now),
            }
        }
        taken
    }

    /// What the plan step sees.
    pub fn observe(&self) -> super::LoadObservation {
        super::LoadObservation {
            estimates: self.estimates.clone(),
            rejected: self.tally.clone(),
        }
    }
}

/// A finite, non-negative rate: refused when above the limit.
fn sound_rate(shard: &str, bytes: f64, limits: &Limits) -> Result<(), Rejection> {
    if bytes > limits.max_rate {
        return Err(Rejection::AbsurdLoad {
            shard: shard.to_owned(),
            value: bytes,
            max: limits.max_rate,
        });
    }
    Ok(())
}
