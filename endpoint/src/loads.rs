//! Measured loads: the load book of every group that uses them
//! (`balance: throughput`, or `scaling.targetKBpsPerPod`), behind one lock.
//! The endpoint's `loads` route hands each report to [`Loads::submit`]; the
//! controller, at each reconcile, syncs a group's book with the published
//! document and the spec's limits, feeds it the lease table's
//! `throughputKBps` ([`Loads::observe`]) and takes its estimates into the
//! observation. The checks and the smoothing are the controller core's
//! (`shardring_core::load`); this module only keeps the books, answers in
//! the wire types and counts every reading by source and result
//! (`shardring_load_readings_total`).
//!
//! Nothing is persisted: a new leader starts with empty books (shards weigh
//! the mean until measured again, and nothing moves meanwhile that the
//! first readings would not justify).

use parking_lot::Mutex;
use std::collections::HashMap;

use jiff::Timestamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use shardring_core::load::{Limits, LoadBook, LoadObservation, ReportRefusal, Tally};
use shardring_core::observation::LeaseObservation;
use shardring_crds::assignment::AssignmentDocument;
use shardring_crds::endpoint::{LoadReport, LoadReportResponse};

use shardring_core::GroupKey;

/// Labels of a counted reading.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadingLabels {
    /// `endpoint` (a consumer's report) or `leaseTable` (`throughputKBps`).
    pub source: &'static str,
    /// `accepted`, or the reason it was refused (`InvalidLoad`,
    /// `AbsurdLoad`, `UnknownShard`, `NotOwner`, `StaleReport`, `FutureEpoch`,
    /// `TooManyShards`).
    pub result: &'static str,
}

/// Why a whole report was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadRefusal {
    /// The leader has not reconciled this group (yet).
    #[error("ShardGroup {0} is not served by this operator (yet); retry shortly")]
    UnknownGroup(String),
    /// The group does not use load measurements.
    #[error(
        "ShardGroup {0} does not use load measurements: they are read for balance: throughput \
         and scaling.targetKBpsPerPod"
    )]
    NotUsed(String),
    /// The book refused the report.
    #[error(transparent)]
    Report(#[from] ReportRefusal),
}

impl LoadRefusal {
    /// Constant reason for the error body.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnknownGroup(_) => "UnknownShardGroup",
            Self::NotUsed(_) => "LoadNotUsed",
            Self::Report(refusal) => refusal.reason(),
        }
    }
}

#[derive(Debug)]
struct GroupLoads {
    book: LoadBook,
    limits: Limits,
}

/// The books of every group the leader reconciles.
#[derive(Debug, Default)]
pub struct Loads {
    /// Groups using loads (`Some`) and groups known not to (`None`).
    groups: Mutex<HashMap<GroupKey, Option<GroupLoads>>>,
    /// Readings by source and result.
    readings: Family<ReadingLabels, Counter>,
}

impl Loads {
    /// Registers `shardring_load_readings_total` into `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "load_readings",
            "Load readings taken (accepted) or refused (by reason), by source (endpoint reports, the lease table's throughputKBps)",
            self.readings.clone(),
        );
    }

    fn count(&self, source: &'static str, result: &'static str, n: u64) {
        if n > 0 {
            self.readings
                .get_or_create(&ReadingLabels { source, result })
                .inc_by(n);
        }
    }

    /// Counts what `tally` refused beyond `before`.
    fn count_refused(&self, source: &'static str, before: &Tally, after: &Tally) {
        for (reason, n) in &after.by_reason {
            let was = before.by_reason.get(reason).copied().unwrap_or(0);
            self.count(source, reason, n.saturating_sub(was));
        }
    }

    /// Records `report` from pod `pod` at `now`: the refused rates are in
    /// the answer (they change nothing), the others are smoothed in.
    pub fn submit(
        &self,
        group: &GroupKey,
        pod: &str,
        report: &LoadReport,
        now: Timestamp,
    ) -> Result<LoadReportResponse, LoadRefusal> {
        let mut groups = self.groups.lock();
        let state = match groups.get_mut(group) {
            None => return Err(LoadRefusal::UnknownGroup(group.to_string())),
            Some(None) => return Err(LoadRefusal::NotUsed(group.to_string())),
            Some(Some(state)) => state,
        };
        let submitted = state.book.report(pod, report, &state.limits, now);
        drop(groups);
        match submitted {
            Ok(recorded) => {
                self.count("endpoint", "accepted", u64::from(recorded.accepted));
                for rejection in &recorded.rejected {
                    self.count("endpoint", rejection.reason(), 1);
                }
                Ok(recorded.response())
            }
            Err(refusal) => {
                self.count(
                    "endpoint",
                    refusal.reason(),
                    report.shards.len().max(1) as u64,
                );
                Err(refusal.into())
            }
        }
    }

    /// At a reconcile of a group that uses loads: syncs its book with the
    /// published `document` and `limits`, reads the lease table's
    /// throughput, and returns what the plan step sees.
    pub fn observe(
        &self,
        group: &GroupKey,
        document: Option<&AssignmentDocument>,
        limits: Limits,
        leases: &LeaseObservation,
        now: Timestamp,
    ) -> LoadObservation {
        let mut groups = self.groups.lock();
        let state = groups
            .entry(group.clone())
            .or_insert(None)
            .get_or_insert_with(|| GroupLoads {
                book: LoadBook::default(),
                limits,
            });
        state.limits = limits;
        state.book.sync(document);
        if let LeaseObservation::Read(table) = leases {
            let before = state.book.observe().rejected;
            let readings = state.book.lease_readings(table, &limits, now);
            let after = state.book.observe();
            drop(groups);
            self.count("leaseTable", "accepted", readings);
            self.count_refused("leaseTable", &before, &after.rejected);
            return after;
        }
        state.book.observe()
    }

    /// What `group`'s book shows now, without syncing or reading anything
    /// (a peer's loads, for the pool's balance); empty when it keeps none.
    pub fn peek(&self, group: &GroupKey) -> LoadObservation {
        match self.groups.lock().get(group) {
            Some(Some(state)) => state.book.observe(),
            _ => LoadObservation::default(),
        }
    }

    /// After a cycle: the document now published, so reports are checked
    /// against the ownership consumers see.
    pub fn sync(&self, group: &GroupKey, document: Option<&AssignmentDocument>) {
        if let Some(Some(state)) = self.groups.lock().get_mut(group) {
            state.book.sync(document);
        }
    }

    /// Notes that `group` does not use loads (its reports are refused as
    /// such, and any book it had is dropped).
    pub fn not_used(&self, group: &GroupKey) {
        self.groups.lock().insert(group.clone(), None);
    }

    /// Forgets a deleted group.
    pub fn remove_group(&self, group: &GroupKey) {
        self.groups.lock().remove(group);
    }

    /// Forgets everything: this replica lost the leadership.
    pub fn clear(&self) {
        self.groups.lock().clear();
    }
}
