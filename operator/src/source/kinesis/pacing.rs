//! Call pacing for Kinesis reads: exponential backoff with full jitter for
//! throttled or transient failures (the operator's shared [`Backoff`]),
//! jittered refresh intervals (every source's, [`crate::source::refresh`]),
//! and a minimum interval between calls to one stream so a burst of
//! refreshes can never exceed a bounded call rate.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

pub use crate::aws::{Backoff, jitter_unit};
pub use crate::source::refresh::jitter_interval;

/// Keeps calls at least `interval` apart: [`MinInterval::acquire`] waits until
/// the previous call is `interval` old. This bounds one stream's call rate at
/// `1 / interval` whatever the number of callers.
#[derive(Debug)]
pub struct MinInterval {
    interval: Duration,
    last: Mutex<Option<Instant>>,
}

impl MinInterval {
    /// A limiter allowing one call per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: Mutex::new(None),
        }
    }

    /// The configured interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Waits for this caller's turn and records the call.
    pub async fn acquire(&self) {
        // Holding the lock across the sleep queues callers fairly (tokio's
        // mutex is FIFO), so each waits its own interval.
        let mut last = self.last.lock().await;
        if let Some(previous) = *last {
            tokio::time::sleep_until(previous + self.interval).await;
        }
        *last = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn min_interval_spaces_calls() {
        let limiter = MinInterval::new(Duration::from_millis(250));
        let start = Instant::now();
        for _ in 0..4 {
            limiter.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::from_millis(750));
    }
}
