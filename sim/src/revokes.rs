//! The bound on a revoke, checked at every step: a revoke ends (its shard
//! active on a new owner, or back on its owner) by `drainTimeout` plus one
//! reconcile. What kept the operator from acting meanwhile (it was down, a
//! write or read failed, its retries backed off, its pod watch relisted, a
//! node was cut off, no pod was eligible to take the shard:
//! [`Group::last_fault`]) moves the start of the bound to its end; a
//! plan blocked for want of an eligible pod stays blocked until a pod is
//! eligible, with no reconcile in between, so the bound starts no earlier
//! than that.
//!
//! What that is, exactly, per rule of the protocol (`R` is one reconcile
//! while moves are in flight: the in-flight poll, plus a step of
//! simulated time for the reconcile to come round):
//!
//! - without a lease table a revoke's drain clock starts when the
//!   reconcile after it sees its pod's annotation listing it (revokes added
//!   to the pod later do not start it again): a revoke ends by the revoke +
//!   `R` + `drainTimeout` + `R`;
//! - with a lease table it ends by the revoke + the later of `drainTimeout`
//!   and the lease failover counted from the last counter change the
//!   operator saw (at most `R` after the change) + `R`.
//!
//! Every other evidence (a released lease, the kubelet's word, an
//! acknowledgement, a pod gone) only ends it sooner. The next reconcile is
//! scheduled by the operator's own requeue and retry rule (the simulated
//! operator runs on it, see [`Operator::reconcile`]), so a requeue that
//! forgot a timer would break this bound.
//!
//! [`Group::last_fault`]: crate::operator::Group::last_fault
//! [`Operator::reconcile`]: crate::operator::Operator::reconcile

use jiff::Timestamp;

use crate::crds::ShardPhase;
use crate::operator::ts;
use crate::sim::{MAX_STEP_MS, Sim};
use crate::world::Ms;
use shardring_core::plan::IN_FLIGHT_POLL;

/// One reconcile while moves are in flight, in ms: the in-flight poll and
/// the step it lands in.
pub fn one_reconcile_ms() -> Ms {
    millis(IN_FLIGHT_POLL) + MAX_STEP_MS
}

impl Sim {
    /// Fails the run when a revoke of a published document outlived its
    /// bound (see the module docs).
    pub(crate) fn check_revokes(&mut self) {
        for g in 0..self.op.groups.len() {
            if let Some(what) = self.revoke_past_its_bound(g) {
                self.world.violate(what);
                return;
            }
        }
    }

    /// The first revoke of group `g`'s published document that outlived
    /// its bound, said.
    fn revoke_past_its_bound(&self, g: usize) -> Option<String> {
        let group = &self.op.groups[g];
        let doc = group.doc.as_ref()?;
        let handoff = &group.shard_group.spec.handoff;
        let drain = millis(handoff.drain_timeout().unwrap_or_default());
        let failover = millis(handoff.lease_failover().unwrap_or_default());
        let lease_table = self.world.sources[g].lease_table;
        let revokes = doc
            .shards
            .iter()
            .filter(|(_, r)| r.state == ShardPhase::Revoking)
            .filter_map(|(id, r)| Some((id, r.owner.as_deref()?, at(r.handoff.as_ref()?.since))));
        let now = self.world.now;
        // A plan blocked for want of an eligible pod stays blocked, with
        // no reconcile, for as long as no pod is eligible; from the first
        // one's eligibility on, its watch event must wake the plan.
        let fault = if group.blocked_without_pods {
            self.eligible_since()
                .map(|(_, at)| at)
                .min()
                .map_or(now, |at| group.last_fault.max(at))
        } else {
            group.last_fault
        };
        let reconcile = one_reconcile_ms();
        for (shard, owner, since) in revokes {
            let deadline = if lease_table {
                since.max(fault) + drain.max(failover + reconcile) + reconcile
            } else {
                since.max(fault) + reconcile + drain + reconcile
            };
            if now > deadline {
                return Some(format!(
                    "the revoke of {shard} on {owner} published at {since} ms still runs at {now} ms, past its bound {deadline} ms (drainTimeout {drain} ms plus one reconcile; lease table: {lease_table}; last fault at {fault} ms; next reconcile at {} ms)",
                    group.next_reconcile
                ));
            }
        }
        None
    }
}

fn millis(d: std::time::Duration) -> Ms {
    Ms::try_from(d.as_millis()).unwrap_or(Ms::MAX / 4)
}

/// A document time as simulated ms.
fn at(t: Timestamp) -> Ms {
    Ms::try_from(t.duration_since(ts(0)).as_millis()).unwrap_or(Ms::MAX / 4)
}
