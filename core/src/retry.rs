//! When a group is reconciled again after its reconcile, the rule the
//! operator's runtime follows and the simulation runs on: after a cycle
//! whose writes all went out, the plan's own requeue
//! ([`crate::Decision::requeue_after`]); after a failed write, exponential
//! backoff from [`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`], reset by the
//! next success, except that the first [`QUIET_CONFLICTS`] stale-read
//! conflicts in a row (the published ConfigMap changed since the cache read
//! it, which the next read fixes) are retried after [`CONFLICT_RETRY`]
//! without backoff. A watch event (a pod, the pool, an acknowledged
//! release) brings the next reconcile forward; the lease table and the
//! source never do, which is why the plan's requeue polls them.

use std::time::Duration;

/// Shortest retry delay after a failed reconcile.
pub const BACKOFF_MIN: Duration = Duration::from_secs(2);
/// Longest retry delay after failed reconciles.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Stale-read conflicts in a row retried quietly: usually the cache had
/// not yet seen the operator's own previous write (a reconcile triggered by
/// its pod patches can run before the watch delivers it). Past this many
/// they are treated as any failed write (another writer may be fighting
/// over the ConfigMap).
pub const QUIET_CONFLICTS: u32 = 3;
/// Retry delay of a quiet conflict: about a watch event's latency.
pub const CONFLICT_RETRY: Duration = Duration::from_millis(500);

/// What follows one failed reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// When to reconcile again.
    pub after: Duration,
    /// Whether this failure is reported (logged as a failure, counted): a
    /// quiet conflict is not.
    pub reported: bool,
    /// Whether it is the first reported failure of its streak (worth one
    /// Warning Event, not one per retry).
    pub first_reported: bool,
}

/// A group's failed reconciles in a row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Failures(u32);

impl Failures {
    /// A reconcile succeeded: the streak ends.
    pub fn succeeded(&mut self) {
        self.0 = 0;
    }

    /// A reconcile failed (`stale_read`: only because the cache lagged
    /// behind the published ConfigMap or the group); what follows.
    pub fn failed(&mut self, stale_read: bool) -> Retry {
        self.0 = self.0.saturating_add(1);
        if stale_read && self.0 <= QUIET_CONFLICTS {
            return Retry {
                after: CONFLICT_RETRY,
                reported: false,
                first_reported: false,
            };
        }
        // Position in the streak, counting only failures that are reported.
        let reported = if stale_read {
            self.0 - QUIET_CONFLICTS
        } else {
            self.0
        };
        Retry {
            after: BACKOFF_MIN
                .saturating_mul(1u32 << (reported - 1).min(10))
                .min(BACKOFF_MAX),
            reported: true,
            first_reported: reported == 1,
        }
    }

    /// Failures in a row so far.
    pub fn count(self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_exponentially_and_a_success_resets_them() {
        let mut failures = Failures::default();
        let delays: Vec<u64> = (0..10)
            .map(|_| failures.failed(false).after.as_secs())
            .collect();
        assert_eq!(delays, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        failures.succeeded();
        let retry = failures.failed(false);
        assert_eq!(retry.after, BACKOFF_MIN);
        assert!(retry.reported && retry.first_reported);
        assert!(!failures.failed(false).first_reported);
    }

    #[test]
    fn the_first_stale_reads_in_a_row_are_retried_quietly() {
        let mut failures = Failures::default();
        for _ in 0..QUIET_CONFLICTS {
            assert_eq!(
                failures.failed(true),
                Retry {
                    after: CONFLICT_RETRY,
                    reported: false,
                    first_reported: false
                }
            );
        }
        // The fourth is the streak's first reported failure.
        let fourth = failures.failed(true);
        assert_eq!(fourth.after, BACKOFF_MIN);
        assert!(fourth.first_reported);
        assert_eq!(failures.failed(true).after, BACKOFF_MIN * 2);
        // Another kind of failure continues the streak, counting every
        // failure of it.
        assert_eq!(failures.failed(false).after, BACKOFF_MIN * 32);
        assert_eq!(failures.count(), 6);
    }
}
