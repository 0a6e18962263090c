//! Inputs and outputs of the assignment engine. Their serde shape is the
//! `shardring-dev plan` CLI contract (camelCase; every field but shard `id` and pod
//! `name` optional with the documented defaults).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Everything one plan needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanInput {
    /// How to plan.
    #[serde(default)]
    pub options: PlanOptions,
    /// The shards of the source, in any order. Shared, not copied: the
    /// caller's topology holds the same list (at 20,000 shards a copy was
    /// megabytes of small allocations at every plan).
    #[serde(default)]
    pub shards: Arc<Vec<Shard>>,
    /// The pods of the pool, in any order.
    #[serde(default)]
    pub pods: Vec<Pod>,
    /// The previous assignment: shard id -> owner (and standbys). Shared,
    /// not copied: a caller that plans again from the same assignment (the
    /// operator, from the same published document) keeps one (at 20,000
    /// shards building it was a tenth of a plan).
    #[serde(default)]
    pub previous: Arc<PreviousAssignment>,
    /// Measured load per shard id (`balance: throughput`; ignored by the
    /// other modes). A readable shard without an entry is unmeasured: it
    /// weighs the mean of the measured ones.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub loads: BTreeMap<String, ShardLoad>,
    /// Count mode, in a pool whose pods serve several groups: the pods the
    /// pool-wide deal ([`crate::pool::deal`]) gives this group's ⌈⌉ quotas.
    /// They take them before any other pod, so every pod's total over the
    /// pool stays within one shard of its share. Absent: the group is
    /// planned alone (names of pods that are not eligible are ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceilings: Option<Vec<String>>,
    /// Standbys, in a pool whose pods serve several groups with standbys:
    /// the pods the pool-wide deal of standby slots ([`crate::pool::deal`]
    /// over each group's slots) gives this group's ⌈⌉ slot quotas, so every
    /// pod's standby slots over the pool stay within one of its share.
    /// Absent: the group's slots are spread alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_ceilings: Option<Vec<String>>,
    /// Throughput mode, in a pool whose pods serve several throughput
    /// groups: the load the pool's other groups put on each pod (by pod
    /// name). It cannot move in this plan, but it counts: each pod's fair
    /// share and band are judged on its whole load over the pool, and this
    /// group's shards move to bring that whole load into the band. Absent
    /// or empty: the group is balanced alone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pool_load: BTreeMap<String, PodLoad>,
}

/// The load a pod carries for other groups of its pool (throughput mode).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodLoad {
    /// Summed rate of those shards, bytes per second.
    pub rate: u64,
    /// Standard error of `rate` (the root of the summed squared noise).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub noise: u64,
    /// The heaviest single shard among them (a pod holding a shard heavier
    /// than its share can do no better than that shard: see the fair
    /// shares in `docs/engine.md`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub heaviest: u64,
    /// The rates of those shards, heaviest first, at most
    /// [`PEER_SHARDS`]: what a move of the other groups can take off the
    /// pod (a group that cannot settle a pod alone trades through them:
    /// see the hand-over in `docs/engine.md`). Empty: only the sums are
    /// known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<u64>,
}

/// How many of a pod's heaviest shards of the pool's other groups
/// [`PodLoad::shards`] lists.
pub const PEER_SHARDS: usize = 16;

/// One shard's measured load: a smoothed rate and how uncertain it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShardLoad {
    /// Smoothed throughput, bytes per second.
    pub rate: u64,
    /// Standard error of `rate` (bytes per second): how far measurement
    /// noise alone may move it. Balancing ignores differences it can
    /// explain (see `docs/engine.md`); 0 treats the rate as exact.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub noise: u64,
    /// How much of `rate` a recent shift of the shard's load added
    /// (negative: took away), bytes per second: a change of level that
    /// noise does not explain, not yet answered by a rebalance. A pod such
    /// shifts pushed toward the band's edge counts as outside the band
    /// without the noise margin (see `docs/load.md`); 0: no shift.
    #[serde(default, skip_serializing_if = "is_zero_signed")]
    pub shift: i64,
}

/// Options of one plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanOptions {
    /// Hashed with each shard id to order the candidate pods.
    #[serde(default)]
    pub consumer_name: String,
    /// What the balance rule weighs.
    #[serde(default)]
    pub balance: Balance,
    /// Backup pods per shard.
    #[serde(default)]
    pub standbys: u32,
    /// Most shards per pod; 0 means no cap.
    #[serde(default)]
    pub max_shards_per_pod: u32,
    /// Whether optional (balancing) moves are made.
    #[serde(default)]
    pub rebalance: Rebalance,
    /// With `rebalance: all`, the most optional (balancing) moves this plan
    /// may make; the controller passes what is left of its move budget.
    /// Absent means no limit. Required moves are never limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_optional_moves: Option<u32>,
    /// `balance: throughput`: how far, in percent of its fair share, a pod's
    /// load may stray before shards move (1 to 100; absent means
    /// [`DEFAULT_BAND_PERCENT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band_percent: Option<u32>,
}

/// The throughput band when none is given: ±10 % of the fair share.
pub const DEFAULT_BAND_PERCENT: u32 = 10;

/// What the balance rule weighs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Balance {
    /// Shard count (weighted by pod capacity).
    #[default]
    Count,
    /// Each shard's share of the 128-bit hash key space.
    HashRange,
    /// Each shard's measured load (`PlanInput::loads`), kept within a band
    /// around every pod's fair share.
    Throughput,
}

impl Balance {
    /// Whether each shard weighs its measured load (`Throughput`): the plan
    /// needs `PlanInput::loads` and a band, and the pool plans such groups
    /// together.
    pub const fn weighs_load(self) -> bool {
        match self {
            Self::Throughput => true,
            Self::Count | Self::HashRange => false,
        }
    }

    /// Whether each shard weighs its share of the hash key space
    /// (`HashRange`).
    pub const fn weighs_key_space(self) -> bool {
        match self {
            Self::HashRange => true,
            Self::Count | Self::Throughput => false,
        }
    }

    /// Whether every shard weighs the same (`Count`), so the pool's deal
    /// gives each pod a quota of the group's shards (its ceilings).
    pub const fn counts_shards(self) -> bool {
        match self {
            Self::Count => true,
            Self::HashRange | Self::Throughput => false,
        }
    }
}

/// Which moves a plan may make.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Rebalance {
    /// Required moves and the optional moves that restore balance.
    #[default]
    All,
    /// Only required moves: shards of ineligible pods, new shards, released children.
    RequiredOnly,
}

/// Lifecycle of a shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ShardState {
    /// Receiving records.
    #[default]
    Open,
    /// Closed by a split or merge; still has records to read.
    Closed,
    /// Read to its end: it drops out of the assignment.
    Complete,
}

/// Inclusive range of the 128-bit hash key space as decimal strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashKeyRange {
    /// First key (decimal).
    pub start: String,
    /// Last key, inclusive (decimal).
    pub end: String,
}

/// One shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Shard {
    /// Shard id, unique within the input.
    pub id: String,
    /// Its hash key range, when the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_key_range: Option<HashKeyRange>,
    /// Parent shard ids (one for a split, two for a merge).
    #[serde(default)]
    pub parents: Vec<String>,
    /// Lifecycle state.
    #[serde(default)]
    pub state: ShardState,
}

/// One pod of the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pod {
    /// Pod name, unique within the input.
    pub name: String,
    /// Ready (for minReadySeconds).
    #[serde(default = "yes")]
    pub ready: bool,
    /// Has a deletion timestamp.
    #[serde(default)]
    pub terminating: bool,
    /// Capacity weight (at least 1).
    #[serde(default = "one")]
    pub capacity: u32,
    /// Zone label, used to spread standbys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Node name, used to spread standbys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// When the pod became Ready, in Unix seconds (the controller takes it
    /// from the Ready condition). Among pods that tie for a ⌈⌉ quota the most
    /// recently ready wins: rolling deploys replace the oldest pods first, so
    /// a shard placed on a young pod does not have to move again when the
    /// next old pod goes. Unknown counts as oldest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_since: Option<i64>,
}

/// A previous assignment: shard id -> owner (and standbys).
pub type PreviousAssignment = BTreeMap<String, Previous>;

/// A shard's previous owner: a pod name, or `{owner, standbys}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Previous {
    /// Just the owner.
    Owner(String),
    /// Owner and standbys.
    Full {
        /// The owner.
        owner: String,
        /// The standbys.
        #[serde(default)]
        standbys: Vec<String>,
    },
}

impl Previous {
    /// The previous owner.
    pub fn owner(&self) -> &str {
        match self {
            Previous::Owner(owner) | Previous::Full { owner, .. } => owner,
        }
    }
    /// The previous standbys.
    pub fn standbys(&self) -> &[String] {
        match self {
            Previous::Owner(_) => &[],
            Previous::Full { standbys, .. } => standbys,
        }
    }
}

/// Where one shard goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardAssignment {
    /// Owner, or null for a pending or unassigned shard.
    pub owner: Option<String>,
    /// Backup pods, never the owner.
    pub standbys: Vec<String>,
}

/// The result of one plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanOutput {
    /// Per shard (readable and pending): owner and standbys. Shared: the
    /// caller's [`EngineMemory`](crate::EngineMemory) keeps it, and its next
    /// plan of a pod change patches it in place once the caller has let go
    /// of this output (at 20,000 shards building it anew was a fifth of a
    /// plan).
    pub assignment: Arc<BTreeMap<String, ShardAssignment>>,
    /// Shards waiting for an incomplete parent, sorted.
    pub pending: Vec<String>,
    /// Readable shards no eligible pod had room for, sorted.
    pub unassigned: Vec<String>,
    /// Shards per eligible pod.
    pub loads: BTreeMap<String, u64>,
    /// Shards whose owner changed from a previous owner to a new one.
    pub moves: u64,
    /// Every move, sorted by shard id, classified for move pacing. Not part
    /// of the `shardring-dev plan` JSON.
    #[serde(skip)]
    pub move_list: Vec<ShardMove>,
    /// `balance: throughput`: each eligible pod's load against its fair
    /// share after this plan, and whether the band was left before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<ThroughputReport>,
}

/// How the load lies after a throughput plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThroughputReport {
    /// Per eligible pod: its load, fair share and noise (bytes per second).
    pub pods: BTreeMap<String, PodThroughput>,
    /// Pods that were outside the band by more than their noise explains
    /// before this plan's optional moves (0: nothing had to move).
    pub out_of_band: u32,
    /// Pods still outside the band after this plan (by more than their
    /// noise explains): the band cannot be reached with the moves allowed.
    pub still_out_of_band: u32,
    /// Optional moves this plan made to bring pods back into the band.
    pub moves: u32,
}

impl ThroughputReport {
    /// Fewest and most load ÷ fair share over the pods, in thousandths
    /// (1000 is exactly the fair share); `None` without pods.
    pub fn spread_permille(&self) -> Option<(u64, u64)> {
        let ratios = self.pods.values().map(PodThroughput::ratio_permille);
        let min = ratios.clone().min()?;
        let max = ratios.max()?;
        Some((min, max))
    }
}

/// One pod's load after a throughput plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodThroughput {
    /// The load of the shards it owns, bytes per second.
    pub load: u64,
    /// Its fair share: the total in proportion to its capacity, or the
    /// weight of a single shard heavier than that share (a pod holding
    /// such a shard can do no better than that shard alone).
    pub fair: u64,
    /// Standard error of `load` (bytes per second).
    pub noise: u64,
}

impl PodThroughput {
    /// Load ÷ fair share in thousandths (1000 when both are 0).
    pub fn ratio_permille(&self) -> u64 {
        if self.fair == 0 {
            return if self.load == 0 { 1000 } else { u64::MAX };
        }
        let ratio = u128::from(self.load) * 1000 / u128::from(self.fair);
        u64::try_from(ratio).unwrap_or(u64::MAX)
    }
}

impl PlanOutput {
    /// Moves that had to happen (previous owner gone, not eligible, or over
    /// `maxShardsPerPod`).
    pub fn required_moves(&self) -> u64 {
        self.move_list
            .iter()
            .filter(|m| m.kind == MoveKind::Required)
            .count() as u64
    }
    /// Moves made only to restore balance.
    pub fn optional_moves(&self) -> u64 {
        self.move_list
            .iter()
            .filter(|m| m.kind == MoveKind::Optional)
            .count() as u64
    }
}

/// Why a shard changed owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MoveKind {
    /// Its previous owner is gone, not ready, terminating, or over its cap.
    Required,
    /// Balancing: its previous owner is eligible but over its quota.
    Optional,
}

/// One shard changing owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMove {
    /// The shard.
    pub shard: String,
    /// Previous owner.
    pub from: String,
    /// New owner.
    pub to: String,
    /// Required or optional.
    pub kind: MoveKind,
}

// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(value: &u64) -> bool {
    *value == 0
}
// serde's `skip_serializing_if` passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero_signed(value: &i64) -> bool {
    *value == 0
}
fn yes() -> bool {
    true
}
fn one() -> u32 {
    1
}
