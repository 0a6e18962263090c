//! Graceful shutdown: one [`CancellationToken`] shared by the controller, the
//! HTTP server and the leader-election task, cancelled on SIGTERM (what the
//! kubelet sends on pod deletion) or Ctrl-C (local runs).

use tokio::signal::unix::{SignalKind, signal as unix_signal};
use tokio::task::JoinHandle;
pub use tokio_util::sync::CancellationToken;

/// Which signal asked the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: the kubelet (or `kill`) asked us to stop.
    Terminate,
    /// SIGINT: Ctrl-C in a terminal.
    Interrupt,
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    /// The OS refused to install a signal handler.
    #[error("cannot install the {signal} handler: {source}")]
    Install {
        /// `SIGTERM` or `SIGINT`.
        signal: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Resolves when the process receives SIGTERM or SIGINT. The handlers are
/// installed when this is called (inside a tokio runtime), not when polled,
/// so install early: a signal that arrives before installation kills the
/// process the default way.
pub fn signal() -> Result<impl Future<Output = Signal> + Send + 'static, ShutdownError> {
    let mut terminate =
        unix_signal(SignalKind::terminate()).map_err(|source| ShutdownError::Install {
            signal: "SIGTERM",
            source,
        })?;
    let mut interrupt =
        unix_signal(SignalKind::interrupt()).map_err(|source| ShutdownError::Install {
            signal: "SIGINT",
            source,
        })?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => Signal::Terminate,
            _ = interrupt.recv() => Signal::Interrupt,
        }
    })
}

/// Installs the signal handlers now and spawns a task that cancels `token`
/// on the first SIGTERM/SIGINT. The task ends quietly when `token` is
/// cancelled for another reason (e.g. the lease task died).
pub fn cancel_on_signal(token: &CancellationToken) -> Result<JoinHandle<()>, ShutdownError> {
    let received = signal()?;
    let token = token.clone();
    Ok(tokio::spawn(async move {
        tokio::select! {
            which = received => {
                tracing::info!(signal = ?which, "shutdown requested, stopping gracefully");
                token.cancel();
            }
            () = token.cancelled() => {}
        }
    }))
}
