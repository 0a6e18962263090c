//! A group as the other groups of its pool see it ([`Peer`]): its mode,
//! its readable shards, its published document and its measured loads;
//! and what a document says of who holds what ([`readable_in`],
//! [`holdings_in`], [`standby_holdings_in`]). The operator builds its
//! peers from its caches, the simulation and the tests from their
//! observations ([`Peer::of`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::crds::AssignmentDocument;
use crate::crds::assignment::ShardPhase;
use crate::crds::shard_group::BalanceMode;
use crate::engine::{ShardLoad, ShardState};
use crate::load::LoadObservation;
use crate::observation::Observation;

/// One group of a pool's balance, as the pool sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    /// `namespace/name` of the ShardGroup.
    pub group: String,
    /// The name of the ConsumerPool it references (same namespace).
    pub pool: String,
    /// What it balances by.
    pub balance: BalanceMode,
    /// Standbys per shard it asks for.
    pub standbys: u32,
    /// Readable shards it assigns.
    pub readable: u64,
    /// Its freshest published document, if it has one.
    pub document: Option<Arc<AssignmentDocument>>,
    /// Its measured shards' loads (throughput mode; empty otherwise or
    /// while nothing is measured).
    pub loads: BTreeMap<String, ShardLoad>,
}

impl Peer {
    /// The group `obs` shows: its readable shards from its document (from
    /// its source's last good topology before its first), its measured
    /// loads when it balances by throughput.
    pub fn of(obs: &Observation) -> Self {
        let document = obs.published.document().cloned().map(Arc::new);
        let readable = match &document {
            Some(doc) => readable_in(doc),
            None => obs.topology.last_good.as_ref().map_or(0, |t| {
                t.shards
                    .iter()
                    .filter(|s| s.state != ShardState::Complete)
                    .count() as u64
            }),
        };
        let spec = &obs.group.spec;
        Self {
            group: obs.group.qualified_name(),
            pool: spec.pool_ref.name.clone(),
            balance: spec.balance,
            standbys: spec.standbys,
            readable,
            document,
            loads: measured_loads(obs),
        }
    }
}

/// The measured loads of a throughput group's observation, by shard.
pub fn measured_loads(obs: &Observation) -> BTreeMap<String, ShardLoad> {
    if !obs.group.spec.balance.weighs_load() {
        return BTreeMap::new();
    }
    measured_loads_of(&obs.loads)
}

/// The measured shards of what a load book shows, by shard (their rate
/// and noise; what a shift added is the group's own news).
pub fn measured_loads_of(loads: &LoadObservation) -> BTreeMap<String, ShardLoad> {
    loads
        .estimates
        .iter()
        .filter(|(_, e)| e.is_measured())
        .map(|(shard, e)| {
            let load = ShardLoad {
                rate: crate::load::whole(e.rate),
                noise: crate::load::whole(e.noise()),
                shift: 0,
            };
            (shard.clone(), load)
        })
        .collect()
}

/// The readable shards of a published document: its Active, Revoking and
/// Held shards (a count, without building anything). A shard held for its
/// returning owner is readable, and the owner's: the group's plan counts
/// it, and the deal deals to that owner as if it were here.
pub fn readable_in(doc: &AssignmentDocument) -> u64 {
    doc.shards
        .values()
        .filter(|s| {
            matches!(
                s.state,
                ShardPhase::Active | ShardPhase::Revoking | ShardPhase::Held
            )
        })
        .count() as u64
}

/// Readable shards per pod in a published document, each counted for the
/// pod that reads it once its handoff ends (as the engine counts a previous
/// owner).
pub fn holdings_in(doc: &AssignmentDocument) -> BTreeMap<String, u64> {
    let mut holdings = BTreeMap::new();
    for owner in crate::handoff::engine_previous(Some(doc)).values() {
        *holdings.entry(owner.owner().to_owned()).or_insert(0) += 1;
    }
    holdings
}

/// Standby slots per pod in a published document.
pub fn standby_holdings_in(doc: &AssignmentDocument) -> BTreeMap<String, u64> {
    let mut holdings = BTreeMap::new();
    for pod in doc.shards.values().flat_map(|r| &r.standbys) {
        *holdings.entry(pod.clone()).or_insert(0) += 1;
    }
    holdings
}

/// Whether a published document has a shard owned, or a standby slot, on a
/// pod outside `here`.
pub(crate) fn holds_outside(doc: &AssignmentDocument, here: &BTreeSet<&str>) -> bool {
    doc.shards.values().any(|record| {
        record
            .owner
            .iter()
            .chain(&record.standbys)
            .any(|pod| !here.contains(pod.as_str()))
    })
}

/// Each readable shard of a published document and the pod that reads
/// it once its handoff ends.
pub(crate) fn owners_in(doc: &AssignmentDocument) -> Vec<(String, String)> {
    crate::handoff::engine_previous(Some(doc))
        .into_iter()
        .map(|(shard, previous)| (shard, previous.owner().to_owned()))
        .collect()
}
