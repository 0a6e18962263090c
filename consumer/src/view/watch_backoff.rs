//! How a Kubernetes watch retries while the API server does not answer,
//! for the consumer's ConfigMap watch and the operator's watches alike:
//! exponential backoff from 500 ms, doubling, capped at 2 s (up to 4 s with
//! jitter), reset by the first event that comes through. kube's default
//! (800 ms doubling to 30 s) left a watch that lived through a ten-second
//! API server outage waiting up to half a minute more after it came back
//! (a consumer then saw its new shards that much later); this one
//! reconnects within 4 s of it, and while it is down each watch still asks
//! at most about once every 2–4 s, so a few watches do not add up to a
//! spin.

use std::time::Duration;

use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::ExponentialBackoff;

/// The first retry's delay.
pub const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest delay before jitter (jitter adds up to as much again).
pub const LONGEST_RETRY: Duration = Duration::from_secs(2);
/// A backoff that has not been used for this long starts again from
/// [`FIRST_RETRY`] (as kube's default does).
const RESET_AFTER: Duration = Duration::from_secs(120);

/// The backoff of one watch.
pub fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(FIRST_RETRY)
        .with_max_delay(LONGEST_RETRY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(exponential), RESET_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_start_at_half_a_second_and_never_wait_more_than_four() {
        let delays: Vec<Duration> = watch_backoff().take(40).collect();
        assert!(
            delays[0] >= FIRST_RETRY && delays[0] < 2 * FIRST_RETRY,
            "{delays:?}"
        );
        assert!(delays.iter().all(|d| *d <= 2 * LONGEST_RETRY), "{delays:?}");
        // Past the first few, every retry waits at least the cap: a watch
        // asks at most once every 2 s while the API server is down.
        assert!(
            delays[3..].iter().all(|d| *d >= LONGEST_RETRY),
            "{delays:?}"
        );
    }
}
