//! When a source reads again: its refresh interval, spread a little either
//! way so groups created together do not read in lockstep. Every kind that
//! lists its shards on an interval jitters it the same way.

use std::time::Duration;

use crate::aws::jitter_unit;

/// How far either way a refresh is jittered.
pub(crate) const REFRESH_JITTER: f64 = 0.1;

/// Spreads a refresh interval by up to `fraction` either way (`unit`, in
/// 0..=1, is the random draw), so readers started together do not call in
/// lockstep.
pub fn jitter_interval(interval: Duration, fraction: f64, unit: f64) -> Duration {
    let spread = (unit.clamp(0.0, 1.0) * 2.0 - 1.0) * fraction.clamp(0.0, 1.0);
    interval.mul_f64(1.0 + spread)
}

/// `interval` jittered by ±[`REFRESH_JITTER`] with a fresh draw.
pub(crate) fn jittered(interval: Duration) -> Duration {
    jitter_interval(interval, REFRESH_JITTER, jitter_unit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_jitter_stays_within_the_fraction() {
        let base = Duration::from_secs(30);
        assert_eq!(jitter_interval(base, 0.1, 0.0), Duration::from_secs(27));
        assert_eq!(jitter_interval(base, 0.1, 0.5), base);
        assert_eq!(jitter_interval(base, 0.1, 1.0), Duration::from_secs(33));
        let drawn = jittered(base);
        assert!(drawn >= Duration::from_secs(27) && drawn <= Duration::from_secs(33));
    }
}
