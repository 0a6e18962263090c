//! When to reconcile again without a watch event: the source's refresh
//! (sooner after a failed read), the next pod to finish `minReadySeconds`,
//! the protocol's timers, and the poll while handoffs are in flight (soon
//! after a revoke, then less and less often).

use std::time::Duration;

use crate::observation::Observation;

/// Retry interval after a failed topology read, when shorter than the refresh.
const ERROR_RETRY: Duration = Duration::from_secs(30);
/// Refresh used when a source's refresh interval cannot be read.
const DEFAULT_REFRESH: Duration = Duration::from_secs(30);
/// How often a group with handoffs in flight looks for evidence again (the
/// lease table and pod deletions do not trigger a reconcile by themselves).
pub const IN_FLIGHT_POLL: Duration = Duration::from_secs(2);
/// The first look at the lease table after a revoke: a consumer that
/// follows its view releases within a few hundred milliseconds, and nothing
/// tells the operator when (the lease table is not watched). The looks
/// after it double in step with the youngest revoke's age, up to
/// [`IN_FLIGHT_POLL`]: about five extra reconciles per wave of revokes.
pub const EVIDENCE_POLL: Duration = Duration::from_millis(100);
/// Shortest requeue for a timer (a drain timeout or the rebalance delay).
pub(crate) const MIN_REQUEUE: Duration = Duration::from_millis(100);

/// When to look again: the source's refresh (sooner after a failed read), or
/// when the next pod finishes `minReadySeconds`, whichever comes first. The
/// refresh is the source's own (jittered, so groups do not read in step)
/// when it said one, else the interval its spec names.
pub(super) fn requeue_after(obs: &Observation) -> Duration {
    let refresh = obs.topology.refresh_after.unwrap_or_else(|| {
        obs.group
            .spec
            .source
            .refresh_interval()
            .unwrap_or(DEFAULT_REFRESH)
    });
    let mut after = if obs.topology.error.is_some() {
        refresh.min(ERROR_RETRY)
    } else {
        refresh
    };
    if let Some(pool) = &obs.pool {
        let min_ready = pool.spec.min_ready();
        for pod in obs
            .pods
            .iter()
            .filter(|p| p.selected && p.ready && p.deletion_timestamp.is_none())
        {
            if let Some(since) = pod.ready_since {
                let due = since
                    .as_millisecond()
                    .saturating_add(i64::try_from(min_ready.as_millis()).unwrap_or(i64::MAX));
                let wait = due - obs.now.as_millisecond();
                if wait > 0 {
                    after = after.min(Duration::from_millis(wait.unsigned_abs()));
                }
            }
        }
    }
    after
}

/// `base`, shortened to the protocol's next check (a drain timeout; never
/// below [`MIN_REQUEUE`]) and, while moves are in flight, to
/// [`IN_FLIGHT_POLL`], or sooner while a revoke is young (`young_revoke`,
/// the youngest one's age, with a lease table): the next look at the lease
/// table comes after as long again as the revoke is old, from
/// [`EVIDENCE_POLL`] up; then, while the rebalance delay holds optional
/// moves back, to its end (`delay_end`) if there is something to rebalance
/// then. Knowing that takes a second engine run (`rebalances`), made only
/// when the delay's end would bring the next look forward.
pub(super) fn next_requeue(
    base: Duration,
    next_check: Option<Duration>,
    moves_in_flight: u64,
    young_revoke: Option<Duration>,
    delay_end: Option<Duration>,
    rebalances: impl FnOnce() -> bool,
) -> Duration {
    let mut requeue_after = base;
    if let Some(wait) = next_check {
        requeue_after = requeue_after.min(wait.max(MIN_REQUEUE));
    }
    if moves_in_flight > 0 {
        requeue_after = requeue_after.min(IN_FLIGHT_POLL);
    }
    if let Some(age) = young_revoke {
        requeue_after = requeue_after.min(age.clamp(EVIDENCE_POLL, IN_FLIGHT_POLL));
    }
    if let Some(wait) = delay_end.map(|w| w.max(MIN_REQUEUE))
        && wait < requeue_after
        && rebalances()
    {
        requeue_after = wait;
    }
    requeue_after
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(young: Option<u64>, in_flight: u64) -> Duration {
        next_requeue(
            Duration::from_secs(30),
            None,
            in_flight,
            young.map(Duration::from_millis),
            None,
            || false,
        )
    }

    #[test]
    fn a_young_revoke_is_looked_at_again_soon_then_less_often() {
        // Published now: look again after 100 ms; then as long again as it
        // is old; never later than the in-flight poll.
        let looks: Vec<u128> = [0, 100, 200, 400, 800, 1_600, 3_200, 60_000]
            .into_iter()
            .map(|age| after(Some(age), 1).as_millis())
            .collect();
        assert_eq!(looks, [100, 100, 200, 400, 800, 1_600, 2_000, 2_000]);
        // No revoke in flight (or no lease table to look at): the source's
        // refresh, or the in-flight poll for other moves.
        assert_eq!(after(None, 0), Duration::from_secs(30));
        assert_eq!(after(None, 1), IN_FLIGHT_POLL);
    }
}
