//! The conditions of a ConsumerPool's status: `Ready`, whether the pool has
//! pods its groups can give shards to. What GitOps health checks (Argo CD,
//! Flux's kstatus) read, kept stable while nothing changes so an unchanged
//! pool writes nothing.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{self, READY, reason};

/// What a pool's `Ready` condition is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounts {
    /// Pods the selector matches.
    pub selected: u64,
    /// Of those, the ones Ready for `minReadySeconds` and not terminating.
    pub eligible: u64,
    /// ShardGroups that reference the pool.
    pub groups: u64,
    /// Active shards over the pool's groups.
    pub shards: u64,
    /// Fewest and most of them one eligible pod reads, when it has any.
    pub spread: Option<(u64, u64)>,
    /// The pool's `minReadySeconds`.
    pub min_ready_seconds: u32,
}

/// The pool's conditions for `counts` at `now` (`previous`: the ones it
/// has, whose `lastTransitionTime` is kept while a status is unchanged).
pub fn pool_conditions(
    counts: &PoolCounts,
    generation: Option<i64>,
    now: Timestamp,
    previous: &[Condition],
) -> Vec<Condition> {
    let ready = if counts.eligible > 0 {
        let spread = counts
            .spread
            .map(|(fewest, most)| format!(", {fewest} to {most} a pod"))
            .unwrap_or_default();
        conditions::condition(
            READY,
            true,
            reason::SERVING,
            format!(
                "{} of {} selected pods are eligible; {} groups, {} shards{spread}",
                counts.eligible, counts.selected, counts.groups, counts.shards
            ),
            generation,
            now,
            previous,
        )
    } else {
        conditions::condition(
            READY,
            false,
            reason::NO_READY_PODS,
            format!(
                "none of the {} pods the selector matches has been Ready for minReadySeconds ({}s); \
                 the pool's {} groups keep their published assignments",
                counts.selected, counts.min_ready_seconds, counts.groups
            ),
            generation,
            now,
            previous,
        )
    };
    vec![ready]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(eligible: u64) -> PoolCounts {
        PoolCounts {
            selected: 3,
            eligible,
            groups: 2,
            shards: 8,
            spread: (eligible > 0).then_some((2, 3)),
            min_ready_seconds: 10,
        }
    }

    #[test]
    fn ready_while_some_pod_is_eligible_and_its_transition_time_is_kept() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let first = pool_conditions(&counts(3), Some(4), t0, &[]);
        assert_eq!(first[0].status, "True");
        assert_eq!(first[0].reason, "Serving");
        assert_eq!(
            first[0].message,
            "3 of 3 selected pods are eligible; 2 groups, 8 shards, 2 to 3 a pod"
        );
        assert_eq!(first[0].observed_generation, Some(4));
        // The same answer later: nothing to write.
        assert_eq!(pool_conditions(&counts(3), Some(4), t1, &first), first);
        let none = pool_conditions(&counts(0), Some(4), t1, &first);
        assert_eq!(none[0].status, "False");
        assert_eq!(none[0].reason, "NoReadyPods");
        assert_eq!(none[0].last_transition_time.0, t1);
    }
}
