//! How shardring waits before it retries, shared by every retry schedule
//! in the workspace so that each one is written once:
//!
//! - [`ceiling`]: the exponential ceiling `min(cap, base · 2ⁿ)` (the core's
//!   reconcile retry rule uses it alone, without jitter: time is an input
//!   there);
//! - [`jitter_unit`]: the random draw that spreads callers apart;
//! - [`Backoff`]: full jitter for throttled or transient AWS calls;
//! - [`watch::watch_backoff`] (feature `watch`): the retry schedule of a
//!   Kubernetes watch.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[cfg(feature = "watch")]
pub mod watch;

/// The ceiling of the delay after failed attempt `attempt` (0-based):
/// `base` doubled `attempt` times, never above `cap`.
pub fn ceiling(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(cap)
}

/// Exponential backoff with full jitter ("Exponential Backoff And Jitter",
/// AWS Architecture Blog): attempt `n` sleeps a uniform random time in
/// `[0, min(cap, base * 2^n)]`, which spreads retries of many callers apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first retry's delay.
    pub base: Duration,
    /// Largest ceiling any retry may reach.
    pub cap: Duration,
    /// Attempts in total (the first call included) before giving up.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(5),
            max_attempts: 6,
        }
    }
}

impl Backoff {
    /// The ceiling of the delay after failed attempt `attempt` (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        ceiling(self.base, self.cap, attempt)
    }

    /// The delay after failed attempt `attempt`, for a jitter draw `unit` in
    /// `[0, 1)`. Pure, so tests can pin the draw.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0))
    }

    /// The delay after failed attempt `attempt` with a fresh random draw.
    pub fn jittered(&self, attempt: u32) -> Duration {
        self.delay(attempt, jitter_unit())
    }
}

/// A uniform draw in `[0, 1)`. Not cryptographic: it only has to differ
/// between calls and processes, which the randomly keyed std hasher gives us
/// without another dependency.
pub fn jitter_unit() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    // 53 random bits make an exactly representable f64 in [0, 1).
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_up_to_the_cap() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            max_attempts: 5,
        };
        assert_eq!(backoff.ceiling(0), Duration::from_millis(100));
        assert_eq!(backoff.ceiling(1), Duration::from_millis(200));
        assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
        assert_eq!(backoff.ceiling(4), Duration::from_secs(1));
        assert_eq!(backoff.ceiling(200), Duration::from_secs(1));
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let backoff = Backoff::default();
        assert_eq!(backoff.delay(2, 0.0), Duration::ZERO);
        assert_eq!(backoff.delay(2, 0.5), Duration::from_millis(200));
        assert_eq!(backoff.delay(2, 7.0), Duration::from_millis(400));
    }

    #[test]
    #[allow(clippy::float_cmp)] // exact: any two draws differing at all is what "vary" means
    fn jitter_draws_are_in_range_and_vary() {
        let draws: Vec<f64> = (0..64).map(|_| jitter_unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
    }
}
