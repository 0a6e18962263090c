//! The handoff step: the two-phase move protocol. It turns the engine's
//! owners into the per-shard records of the published document, given the
//! previous records (with their `state` and `handoff`), what was observed of
//! the pods and the lease table, and the observation's time.
//!
//! Per shard the protocol state is `Active{owner}`, `Revoking{owner, to,
//! since}` or `Pending`/`Complete`. Moving a shard from A to B first
//! publishes it in A's `revoking` list (and nowhere as active); only when
//! there is evidence that A let go is it published `active` on B, at a higher
//! epoch. Evidence, checked in this order ([`Evidence`]):
//!
//! 1. the kubelet's word (`pod_stopped`, with or without a lease table):
//!    every pod named A that may have read the shard has stopped, or never
//!    started. The pod object A (or, once it is gone, its final state in the
//!    memory of departed pods) shows every container `terminated` while
//!    terminating, which the kubelet reports only after it stopped them; or
//!    it never ran anything and cannot have started before the revoke (not
//!    bound to a node, or created after the revoke); and no earlier pod of
//!    the same name (a StatefulSet's pod recreated) can still run. A force
//!    deletion or a node that stopped reporting leaves a status that still
//!    says `running`: neither is ever this evidence;
//! 2. A's own word (`release_acked`): the consumer endpoint recorded A's
//!    acknowledgement that it stopped reading the shard, at the revoke's
//!    epoch or later (`handoff.epoch`, so an acknowledgement of an earlier
//!    revoke never counts), from the pod object named A now (its uid), and
//!    every remembered earlier pod of the name let go. Its checkpoint, if
//!    any, goes to the next owner's record;
//! 3. the lease table (scanned after the revoke) shows A no longer holds the
//!    lease: owner changed or cleared and `checkpointOwner` is not A;
//! 4. with a lease table: A's pod is gone from the API after a graceful
//!    deletion (A was seen terminating with a grace period above zero and not
//!    force-deleted since): the kubelet removes such a pod only after its
//!    containers stopped. A force deletion of a terminating pod removes the
//!    object at once and cannot be told apart, so this is trusted only where
//!    the lease fences a process that outlived its pod object;
//! 5. with a lease table: the drain timeout passed since the revoke AND A's
//!    lease expired (counter unchanged for the lease failover time: since
//!    the revoke at the latest while it is the counter the revoke recorded,
//!    `handoff.leaseCounter`, so an operator restarted since does not start
//!    that clock again);
//! 6. without a lease table (unfenced, see `docs/handoff.md`): the drain
//!    timeout passed since A's annotation was first seen listing the shard as
//!    revoking, or since the revoke when A's pod is gone.
//!
//! A failed lease read is never evidence. All the state this needs lives in
//! the published document (`state`, `handoff.to`, `handoff.since`,
//! `handoff.epoch`, `handoff.leaseCounter`) and the status (`gracefulPods`, `drainDeliveries`), so a
//! restarted operator resumes every move where it was; rules 1 and 2 also
//! read the operator's memory of departed pods, and rule 2 the
//! acknowledgements the leader holds in memory (a consumer sends again what
//! its view still lists as revoking): without them it falls back to the
//! others.
//!
//! The files: `step` advances each shard's record (and holds the engine's
//! view of the previous assignment), `evidence` decides whether a revoked
//! owner let go, `clocks` keeps the timing rules and the drain and
//! graceful-deletion bookkeeping, `bookkeeping` is what the status stores,
//! `recover` rebuilds a lost document from the pods' annotations.

mod bookkeeping;
mod clocks;
mod evidence;
mod plain;
mod recover;
mod step;
mod step_context;
#[cfg(test)]
mod tests;

pub(crate) use bookkeeping::ProtocolStatus;
pub(crate) use clocks::Timing;
pub(crate) use plain::{PlainRecords, skips};
pub use recover::UNKNOWN_READER;
pub(crate) use recover::{recover_previous, revoke_unknown_readers, trusted_memory};
pub(crate) use step::{engine_previous, step};
pub(crate) use step_context::HandoffResult;
pub use step_context::{Completed, Evidence, HoldEnded};

/// Progressing reason while handoffs run without a lease table (the weaker,
/// unfenced guarantee: see `docs/handoff.md`).
pub(crate) const HANDOFF_UNFENCED: &str = "HandoffUnfenced";
