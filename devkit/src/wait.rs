//! Polling with a deadline, for every crate's tests: they wait for a
//! condition to hold rather than sleeping a fixed time. [`wait_for`] returns
//! an error whose timeout reports the last thing observed, so a failure says
//! what was missing (the end-to-end harness), [`wait_for_every`] the same
//! at a chosen interval; [`until`] polls a plain
//! condition fast and fails the calling test when it never holds.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often a condition is re-checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// One observation of a condition being waited for.
pub enum Probe<T> {
    /// The condition holds; the wait returns this value.
    Done(T),
    /// Not yet, and what was seen instead (kept for the timeout message).
    Pending(String),
}

/// Why a wait failed.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The deadline passed before the condition held.
    #[error("timed out after {waited:?} waiting for {what}; last seen: {last}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long the wait lasted.
        waited: Duration,
        /// The last [`Probe::Pending`] description.
        last: String,
    },
    /// A probe failed with an error that retrying will not fix.
    #[error("while waiting for {what}: {source}")]
    Probe {
        /// What was waited for.
        what: String,
        /// The probe's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Calls `probe` every [`POLL_INTERVAL`] until it returns [`Probe::Done`] or
/// `timeout` passes. A probe error ends the wait at once; probes that expect
/// transient errors (e.g. 404 before an object exists) map them to
/// [`Probe::Pending`] themselves.
pub async fn wait_for<T, E, F, Fut>(what: &str, timeout: Duration, probe: F) -> Result<T, WaitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Probe<T>, E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    wait_for_every(POLL_INTERVAL, what, timeout, probe).await
}

/// [`wait_for`], calling `probe` every `interval`: for a wait that also
/// times when the condition came to hold.
pub async fn wait_for_every<T, E, F, Fut>(
    interval: Duration,
    what: &str,
    timeout: Duration,
    mut probe: F,
) -> Result<T, WaitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Probe<T>, E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        let last = match probe().await {
            Ok(Probe::Done(value)) => return Ok(value),
            Ok(Probe::Pending(seen)) => seen,
            Err(error) => {
                return Err(WaitError::Probe {
                    what: what.to_owned(),
                    source: error.into(),
                });
            }
        };
        if Instant::now() >= deadline {
            return Err(WaitError::Timeout {
                what: what.to_owned(),
                waited: start.elapsed(),
                last,
            });
        }
        tokio::time::sleep(interval.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// How often [`until`] re-checks its condition.
pub const FAST_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Polls `condition` every [`FAST_POLL_INTERVAL`] until it holds; panics
/// (failing the calling test) with `what` once `timeout` has passed.
pub async fn until(what: &str, timeout: Duration, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(FAST_POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom;

    #[tokio::test]
    async fn returns_the_value_once_the_condition_holds() {
        let mut calls = 0;
        let value = wait_for("three calls", Duration::from_secs(10), || {
            calls += 1;
            let seen = calls;
            async move {
                Ok::<_, Boom>(if seen >= 3 {
                    Probe::Done(seen)
                } else {
                    Probe::Pending(format!("call {seen}"))
                })
            }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);
    }

    #[tokio::test]
    async fn times_out_with_the_last_observation() {
        let error = wait_for("never", Duration::from_millis(600), || async {
            Ok::<Probe<()>, Boom>(Probe::Pending("still pending".into()))
        })
        .await
        .unwrap_err();
        let message = error.to_string();
        assert!(message.contains("waiting for never"), "{message}");
        assert!(message.contains("last seen: still pending"), "{message}");
    }

    #[tokio::test]
    async fn until_returns_once_the_condition_holds() {
        let mut calls = 0;
        until("three calls", Duration::from_secs(10), async || {
            calls += 1;
            calls >= 3
        })
        .await;
        assert_eq!(calls, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for never")]
    async fn until_fails_the_test_after_the_timeout() {
        until("never", Duration::from_millis(100), async || false).await;
    }

    #[tokio::test]
    async fn a_probe_error_ends_the_wait() {
        let error = wait_for("failing", Duration::from_secs(60), || async {
            Err::<Probe<()>, _>(Boom)
        })
        .await
        .unwrap_err();
        assert!(matches!(error, WaitError::Probe { .. }), "{error}");
    }
}
