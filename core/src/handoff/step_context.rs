//! What the handoff step decides from and what it returns, shared by the
//! step ([`super::step`]) and its evidence rules ([`super::evidence`]): the
//! step's context, a revoke in flight, the evidence a handoff completed on,
//! and the step's result.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use super::clocks::{Deliveries, Timing};
use crate::identity::Identities;
use crate::observation::{Observation, PodInfo};

/// Why a revoked owner is known to have let a shard go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Evidence {
    /// The kubelet reported the owner's containers stopped (or never
    /// started), and no earlier pod of its name can still run.
    PodStopped,
    /// The owner acknowledged the release through the consumer endpoint, at
    /// the revoke's epoch or later, and no earlier pod of its name can
    /// still run.
    ReleaseAcked,
    /// The lease table shows the owner no longer holds the shard's lease.
    LeaseReleased,
    /// The owner's pod is gone after a graceful deletion.
    PodGone,
    /// The drain timeout passed and the owner's lease expired.
    LeaseExpired,
    /// No lease table: the drain timeout passed (unfenced).
    DrainTimeout,
}

impl Evidence {
    /// Label for metrics and Events.
    pub fn label(self) -> &'static str {
        match self {
            Evidence::PodStopped => "pod_stopped",
            Evidence::ReleaseAcked => "release_acked",
            Evidence::LeaseReleased => "lease_released",
            Evidence::PodGone => "pod_gone",
            Evidence::LeaseExpired => "lease_expired",
            Evidence::DrainTimeout => "drain_timeout",
        }
    }
}

/// A handoff that completed in this plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The shard.
    pub shard: String,
    /// Its previous owner.
    pub from: String,
    /// Its new owner (`None`: no eligible pod had room).
    pub to: Option<String>,
    /// What showed the previous owner let go.
    pub evidence: Evidence,
    /// Time from the revoke to now.
    pub duration: Duration,
}

/// A hold for a returning pod that ended in this plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldEnded {
    /// The shard.
    pub shard: String,
    /// The pod it waited for.
    pub pod: String,
    /// When the pod went away.
    pub since: Timestamp,
    /// Whether the pod came back for it (else it moved to another pod, or
    /// stays unassigned).
    pub returned: bool,
}

/// The result of the handoff step.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct HandoffResult {
    /// Handoffs completed in this plan.
    pub completed: Vec<Completed>,
    /// Revokes started in this plan.
    pub revokes_started: u64,
    /// Pods seen terminating gracefully that still hold revoking shards.
    pub graceful_pods: Vec<String>,
    /// Drain clocks per pod holding revoking shards: when its revokes were
    /// delivered.
    pub drain_deliveries: Deliveries,
    /// When the oldest revoke in flight was published.
    pub oldest_revoke: Option<Timestamp>,
    /// When the youngest revoke in flight was published.
    pub youngest_revoke: Option<Timestamp>,
    /// How long until some revoke in flight may complete by a timeout, or
    /// a hold for a returning pod ends, if any.
    pub next_check: Option<Duration>,
    /// Holds for returning pods that ended in this plan.
    pub holds_ended: Vec<HoldEnded>,
}

/// What one step decides from: the observation, the timing rules, the pods
/// by name, the pods known to be terminating gracefully and the drain clocks.
pub(super) struct Ctx<'a> {
    pub(super) obs: &'a Observation,
    pub(super) timing: Timing,
    pub(super) pods: &'a BTreeMap<&'a str, &'a PodInfo>,
    pub(super) graceful: &'a BTreeSet<String>,
    pub(super) drain: &'a Deliveries,
    pub(super) next_epoch: u64,
    pub(super) published_epoch: u64,
    pub(super) identities: &'a Identities,
}

/// A revoke in flight: when it was first published, at which epoch, and
/// the revoked owner's lease counter then (with a lease table).
#[derive(Debug, Clone, Copy)]
pub(super) struct Revoke {
    pub(super) since: Timestamp,
    pub(super) epoch: u64,
    pub(super) lease_counter: Option<u64>,
}
