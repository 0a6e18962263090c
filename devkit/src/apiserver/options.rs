//! [`MockOptions`]: the mock's pacing, limits and faults, fixed at start
//! (some also settable at run time on the server).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

/// Answers a TokenReview: `(token, audiences) -> status` (the
/// `TokenReviewStatus` JSON, e.g. `{"authenticated": true, "user": {...}}`).
pub type TokenReviewer = Arc<dyn Fn(&str, &[String]) -> Value + Send + Sync>;

/// The default reviewer: every token is unauthenticated.
pub fn unauthenticated_reviewer() -> TokenReviewer {
    Arc::new(|_, _| json!({ "authenticated": false, "error": "token not recognised by the mock" }))
}

/// How the mock behaves.
#[derive(Clone)]
pub struct MockOptions {
    /// Namespace of the kubeconfig's context (`default`).
    pub namespace: String,
    /// The bearer token clients must send; random when `None`.
    pub token: Option<String>,
    /// Watch events each resource's history keeps for watches resuming from
    /// a resourceVersion (10,000); older ones get 410 Gone.
    pub watch_history: usize,
    /// Serialized bytes each resource's history keeps (256 MiB).
    pub watch_history_bytes: usize,
    /// Capacity of the channel fanning writes out to watches (65,536): a
    /// watch that falls this far behind gets 410 Gone and is closed.
    pub broadcast_capacity: usize,
    /// Interval between BOOKMARK events on watches that allow them (1 s).
    pub bookmark_interval: Duration,
    /// Closes every watch after this long, sooner than the client's
    /// `timeoutSeconds`, so tests exercise re-watching (`None`: no limit).
    pub max_watch: Option<Duration>,
    /// Delay before answering a list (not a watch).
    pub list_delay: Duration,
    /// Delay before answering any request.
    pub request_delay: Duration,
    /// Requests the log keeps (20,000; counters count every request).
    pub request_log_capacity: usize,
    /// Answers TokenReviews.
    pub token_reviewer: TokenReviewer,
}

impl Default for MockOptions {
    fn default() -> Self {
        MockOptions {
            namespace: "default".to_owned(),
            token: None,
            watch_history: 10_000,
            watch_history_bytes: 256 << 20,
            broadcast_capacity: 65_536,
            bookmark_interval: Duration::from_secs(1),
            max_watch: None,
            list_delay: Duration::ZERO,
            request_delay: Duration::ZERO,
            request_log_capacity: 20_000,
            token_reviewer: unauthenticated_reviewer(),
        }
    }
}

impl std::fmt::Debug for MockOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockOptions")
            .field("namespace", &self.namespace)
            .field("watch_history", &self.watch_history)
            .field("watch_history_bytes", &self.watch_history_bytes)
            .field("broadcast_capacity", &self.broadcast_capacity)
            .field("bookmark_interval", &self.bookmark_interval)
            .field("max_watch", &self.max_watch)
            .field("list_delay", &self.list_delay)
            .field("request_delay", &self.request_delay)
            .field("request_log_capacity", &self.request_log_capacity)
            .finish_non_exhaustive()
    }
}
