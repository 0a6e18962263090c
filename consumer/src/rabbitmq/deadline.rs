//! A deadline on every call of the worker that waits for the broker (or for
//! lapin's I/O loop): opening a connection, a channel, `basic.qos`,
//! `basic.consume`, an acknowledgement, a channel's close. lapin can leave
//! such a call's future pending for ever when the connection dies while
//! the call is queued: the connection's pending calls are failed once, and
//! a call queued just after that is never sent nor failed. Seen at a broker
//! restart: an acknowledgement's future never resolved, so the queue's
//! reader waited on it for good, its hold was never ended, and the queue
//! was read by nobody while its owner looked healthy. A call past its
//! deadline is a failed call: the hold ends as lost and is opened again.

use std::future::Future;
use std::time::Duration;

/// How long a call on an open connection may take. A broker answers these
/// in milliseconds; one that is only slow ends a hold that may have kept
/// going (its messages are delivered again, at least once as always).
pub const CALL: Duration = Duration::from_secs(5);
/// How long opening a connection may take (TCP, TLS, the AMQP handshake).
pub const CONNECT: Duration = Duration::from_secs(10);

/// A broker call that failed or did not finish within its deadline.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The broker (or lapin) refused or failed the call.
    #[error(transparent)]
    Broker(#[from] lapin::Error),
    /// No outcome within the deadline.
    #[error("{what}: no outcome within {deadline:?} (the connection was probably lost meanwhile)")]
    Timeout {
        /// The call.
        what: &'static str,
        /// Its deadline.
        deadline: Duration,
    },
}

/// `call` (named `what` in errors), failed when it takes longer than
/// `deadline`.
pub async fn bounded<T>(
    what: &'static str,
    deadline: Duration,
    call: impl Future<Output = Result<T, lapin::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(deadline, call).await {
        Ok(outcome) => Ok(outcome?),
        Err(_) => Err(CallError::Timeout { what, deadline }),
    }
}

#[cfg(test)]
mod tests {
    use super::{CallError, bounded};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_ends_fails_at_its_deadline() {
        let never = std::future::pending::<Result<(), lapin::Error>>();
        let outcome = bounded("basic.ack", Duration::from_secs(5), never).await;
        assert!(
            matches!(
                outcome,
                Err(CallError::Timeout {
                    what: "basic.ack",
                    ..
                })
            ),
            "{outcome:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_ends_in_time_gives_its_outcome() {
        let quick = async { Ok::<_, lapin::Error>(7) };
        assert_eq!(
            bounded("channel.open", Duration::from_secs(5), quick)
                .await
                .unwrap(),
            7
        );
    }
}
