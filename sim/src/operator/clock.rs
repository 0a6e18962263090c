//! The simulated clock as the API objects show it: [`ts`], the timestamp of
//! a simulated millisecond (its zero a fixed instant), and [`sim_ms`], the
//! simulated millisecond of a timestamp.

use jiff::{SignedDuration, Timestamp};

use crate::world::Ms;

/// Simulated epoch zero.
pub fn ts(ms: Ms) -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid") + SignedDuration::from_millis(ms)
}

/// The simulated time of `t` (the inverse of [`ts`]).
pub fn sim_ms(t: Timestamp) -> Ms {
    t.as_millisecond() - ts(0).as_millisecond()
}
