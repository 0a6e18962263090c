//! Fixed-window rate limits of the consumer endpoint: time is cut into
//! windows of equal length, aligned for every key, and each key (a source IP
//! before authentication, a pod after) may make `limit` requests per window.
//! A counter per key per window, as the cheapest limiter there is: one map
//! lookup and an increment per request. The price is that a caller can spend
//! up to twice the limit across a window boundary, which is fine for a
//! guard against runaway clients.
//!
//! Memory stays bounded by the keys seen in the current window: when the
//! window changes, every counter of the past one is dropped at once.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// What the limiter says of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admission {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Requests allowed per window (`X-RateLimit-Limit`).
    pub limit: u64,
    /// Requests left in this window after this one (`X-RateLimit-Remaining`).
    pub remaining: u64,
    /// Whole seconds until the window ends, at least 1 (`X-RateLimit-Reset`,
    /// and `Retry-After` of a refused request).
    pub reset_secs: u64,
}

#[derive(Debug)]
struct Counters<K> {
    /// Index of the window the counters are about.
    window: u128,
    counts: HashMap<K, u64>,
}

/// A fixed-window limiter over keys `K`.
#[derive(Debug)]
pub(crate) struct FixedWindow<K> {
    limit: u64,
    window: Duration,
    /// Where window 0 starts; windows are aligned to it.
    origin: Instant,
    counters: Mutex<Counters<K>>,
}

impl<K: Hash + Eq + Clone> FixedWindow<K> {
    /// `limit` requests per key per `window` (a zero window counts as one
    /// millisecond, so the arithmetic never divides by zero).
    pub(crate) fn new(limit: u64, window: Duration) -> Self {
        Self {
            limit,
            window: window.max(Duration::from_millis(1)),
            origin: Instant::now(),
            counters: Mutex::new(Counters {
                window: 0,
                counts: HashMap::new(),
            }),
        }
    }

    /// Counts one request of `key` now.
    pub(crate) fn check(&self, key: &K) -> Admission {
        self.check_at(key, Instant::now().saturating_duration_since(self.origin))
    }

    /// Counts one request of `key` at `elapsed` since the limiter's origin
    /// (time never goes backwards for callers: a request from an older
    /// window than the current one is counted in the current one).
    pub(crate) fn check_at(&self, key: &K, elapsed: Duration) -> Admission {
        let window_nanos = self.window.as_nanos();
        let index = elapsed.as_nanos() / window_nanos;
        let mut counters = self.counters.lock();
        if index > counters.window {
            // A new window: the past one's counters are of no use any more.
            counters.window = index;
            counters.counts.clear();
        }
        let index = counters.window;
        let count = counters.counts.entry(key.clone()).or_insert(0);
        let allowed = *count < self.limit;
        if allowed {
            *count += 1;
        }
        let used = *count;
        drop(counters);
        let end_nanos = (index + 1) * window_nanos;
        let left_nanos = end_nanos.saturating_sub(elapsed.as_nanos());
        let reset_secs = u64::try_from(left_nanos.div_ceil(1_000_000_000))
            .unwrap_or(u64::MAX)
            .max(1);
        Admission {
            allowed,
            limit: self.limit,
            remaining: self.limit.saturating_sub(used),
            reset_secs,
        }
    }

    /// Keys counted in the current window (memory in use).
    #[cfg(test)]
    pub(crate) fn keys(&self) -> usize {
        self.counters.lock().counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_limit_is_per_key_and_a_new_window_admits_again() {
        let limiter = FixedWindow::new(2, Duration::from_secs(10));
        let at = |s: u64| Duration::from_millis(s);
        assert!(limiter.check_at(&"a", at(0)).allowed);
        let second = limiter.check_at(&"a", at(1_000));
        assert_eq!((second.allowed, second.remaining), (true, 0));
        let third = limiter.check_at(&"a", at(2_500));
        assert!(!third.allowed);
        assert_eq!(third.reset_secs, 8, "7.5 s left, rounded up");
        assert!(limiter.check_at(&"b", at(2_500)).allowed, "another key");
        let next = limiter.check_at(&"a", at(10_000));
        assert_eq!(
            (next.allowed, next.remaining, next.reset_secs),
            (true, 1, 10)
        );
        assert_eq!(limiter.keys(), 1, "the past window's counters are gone");
    }

    proptest! {
        /// Whatever the order of requests, no key is admitted more than
        /// `limit` times in one window; remaining and reset agree with the
        /// count and the window's end; a key's first request in a window is
        /// always admitted.
        #[test]
        fn never_more_than_limit_per_key_per_window(
            limit in 0u64..6,
            window_ms in 1u64..5_000,
            steps in proptest::collection::vec((0u8..4, 0u64..3_000), 1..200),
        ) {
            let window = Duration::from_millis(window_ms);
            let limiter = FixedWindow::new(limit, window);
            let mut now = 0u64;
            let mut admitted: HashMap<(u8, u64), u64> = HashMap::new();
            let mut seen: HashMap<(u8, u64), u64> = HashMap::new();
            for (key, advance) in steps {
                now += advance;
                let elapsed = Duration::from_millis(now);
                let decision = limiter.check_at(&key, elapsed);
                let index = now / window_ms;
                let requests = seen.entry((key, index)).or_insert(0);
                *requests += 1;
                let count = admitted.entry((key, index)).or_insert(0);
                if decision.allowed {
                    *count += 1;
                }
                prop_assert!(*count <= limit);
                prop_assert_eq!(decision.allowed, *requests <= limit);
                prop_assert_eq!(decision.remaining, limit - *count);
                prop_assert_eq!(decision.limit, limit);
                let end_ms = (index + 1) * window_ms;
                prop_assert_eq!(decision.reset_secs, (end_ms - now).div_ceil(1_000).max(1));
                prop_assert!(decision.reset_secs <= window_ms.div_ceil(1_000).max(1));
                if *requests == 1 && limit > 0 {
                    prop_assert!(decision.allowed, "the first request of a window is admitted");
                }
            }
        }

        /// Counters of past windows are dropped: after a request in a later
        /// window only the keys of that window remain.
        #[test]
        fn memory_holds_only_the_current_window(keys in 1u16..300) {
            let limiter = FixedWindow::new(1, Duration::from_secs(1));
            for key in 0..keys {
                limiter.check_at(&key, Duration::from_millis(10));
            }
            prop_assert_eq!(limiter.keys(), usize::from(keys));
            limiter.check_at(&0, Duration::from_millis(1_500));
            prop_assert_eq!(limiter.keys(), 1);
        }
    }
}
