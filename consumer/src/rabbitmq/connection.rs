//! The worker's one AMQP connection, shared by its queues' channels: opened
//! on first use, opened again after the broker went away, and never tried
//! more often than a backoff allows, so a broker that is down costs one
//! attempt per interval however many queues wait for it.

use std::sync::Arc;
use std::time::Duration;

use lapin::{Connection, ConnectionProperties};
use shardring_backoff::Backoff;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::deadline::{self, bounded};

/// The backoff between connection attempts while the broker is away.
const RECONNECT: Backoff = Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(2),
    // Not used: a connection is tried again for as long as it is needed.
    max_attempts: u32::MAX,
};

#[derive(Default)]
struct State {
    connection: Option<Arc<Connection>>,
    failures: u32,
    next_attempt: Option<Instant>,
}

/// A connection to one broker, opened when needed.
pub(crate) struct Shared {
    url: String,
    name: String,
    state: Mutex<State>,
}

impl Shared {
    /// Connects to `url` (an `amqp://` or `amqps://` URI) when first asked,
    /// naming the connection `name` (shown in the management UI).
    pub(crate) fn new(url: &str, name: &str) -> Self {
        Self {
            url: url.to_owned(),
            name: name.to_owned(),
            state: Mutex::new(State::default()),
        }
    }

    /// The open connection, opening it if it is not; `None` while the
    /// broker cannot be reached (and before the backoff allows another try).
    pub(crate) async fn get(&self) -> Option<Arc<Connection>> {
        let mut state = self.state.lock().await;
        if let Some(connection) = &state.connection {
            if connection.status().connected() {
                return Some(Arc::clone(connection));
            }
            tracing::warn!(url = %redact(&self.url), "connection to the broker lost");
            state.connection = None;
        }
        if state.next_attempt.is_some_and(|at| Instant::now() < at) {
            return None;
        }
        let properties =
            ConnectionProperties::default().with_connection_name(self.name.clone().into());
        let connecting = Connection::connect(&self.url, properties);
        match bounded("connection.open", deadline::CONNECT, connecting).await {
            Ok(connection) => {
                if state.failures > 0 {
                    tracing::info!(url = %redact(&self.url), attempts = state.failures + 1, "connected to the broker again");
                }
                let connection = Arc::new(connection);
                *state = State {
                    connection: Some(Arc::clone(&connection)),
                    ..State::default()
                };
                Some(connection)
            }
            Err(error) => {
                let wait = RECONNECT.jittered(state.failures);
                if state.failures == 0 {
                    tracing::warn!(url = %redact(&self.url), %error, "cannot connect to the broker; retrying with backoff");
                }
                state.failures = state.failures.saturating_add(1);
                state.next_attempt = Some(Instant::now() + wait);
                None
            }
        }
    }

    /// Closes the connection (at exit), if open.
    pub(crate) async fn close(&self) {
        if let Some(connection) = self.state.lock().await.connection.take() {
            let _ = connection.close(200, "shutting down".into()).await;
        }
    }
}

/// `url` without its password, for logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn logs_never_show_the_password() {
        assert_eq!(
            redact("amqp://app:s3cret@rabbitmq:5672/%2F"),
            "amqp://app:***@rabbitmq:5672/%2F"
        );
        assert_eq!(redact("amqp://rabbitmq:5672"), "amqp://rabbitmq:5672");
    }
}
