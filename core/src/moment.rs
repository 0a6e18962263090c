//! A point in time as the caller's clock gives it ([`Moment`]): the
//! operator's monotonic clock, or the simulation's. The core's state that
//! keeps time between events ([`crate::echoes`],
//! [`crate::pool::precedence`]) is generic over it, so the operator and
//! the simulation run the same lines on their own clocks.

use std::time::Duration;

/// A point in time, as the caller's clock gives it: a monotonic one in the
/// operator, the simulated one in the simulation.
pub trait Moment: Copy + Ord {
    /// How long after `earlier` this is (zero if it is not after it).
    fn since(self, earlier: Self) -> Duration;

    /// The moment `duration` after this one.
    fn after(self, duration: Duration) -> Self;
}

impl Moment for std::time::Instant {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }

    fn after(self, duration: Duration) -> Self {
        self + duration
    }
}

impl Moment for jiff::Timestamp {
    fn since(self, earlier: Self) -> Duration {
        Duration::try_from(self.duration_since(earlier)).unwrap_or_default()
    }

    fn after(self, duration: Duration) -> Self {
        let signed = jiff::SignedDuration::try_from(duration).unwrap_or(jiff::SignedDuration::MAX);
        self.checked_add(signed).unwrap_or(jiff::Timestamp::MAX)
    }
}
