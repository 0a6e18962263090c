//! [`Clock`]: the one source of wall-clock time the operator's components
//! that decide from time read (the reconcile's `now`, the leader Lease's
//! renew and expiry times), injectable so tests and benches control it.

use std::sync::Arc;

use jiff::Timestamp;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// Any function returning the time is a clock (`Arc::new(|| at)` in tests).
impl<F> Clock for F
where
    F: Fn() -> Timestamp + Send + Sync + 'static,
{
    fn now(&self) -> Timestamp {
        self()
    }
}

/// The system clock.
pub(crate) fn system() -> Arc<dyn Clock> {
    Arc::new(Timestamp::now)
}
