//! The body of a watch: newline-delimited JSON events, one flushed chunk per
//! event. It first sends the replay from history (or the synthetic ADDED
//! events of the current state), then live events from the broadcast,
//! filtered by namespace and selectors — an object that starts matching
//! arrives as ADDED, one that stops as DELETED. BOOKMARKs go out on a timer
//! and before a timed close; a watch that falls behind the broadcast gets a
//! 410 ERROR event and is closed, as on the real server.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use serde_json::json;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::{Interval, MissedTickBehavior, Sleep};
use tokio_util::sync::CancellationToken;

use super::selector::Filter;
use super::status::ApiError;
use super::store::read::WatchStart;
use super::store::{EventType, Notice, WatchEvent, partial_metadata};

/// Objects above this size are sent as three chunks (prefix, object,
/// suffix) instead of being copied into one line.
const COPY_LIMIT: usize = 64 * 1024;

/// How one watch behaves.
#[derive(Debug, Clone)]
pub(crate) struct WatchSpec {
    /// Storage key of the watched resource.
    pub resource: Arc<str>,
    /// `apiVersion` and `kind` of bookmarks.
    pub api_version: String,
    /// See `api_version`.
    pub kind: String,
    /// What the watch selects.
    pub filter: Filter,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// Objects as PartialObjectMetadata.
    pub partial: bool,
    /// When the server closes the watch.
    pub lifetime: Duration,
    /// Interval between bookmarks.
    pub bookmark_interval: Duration,
}

struct Watch {
    spec: WatchSpec,
    rx: tokio::sync::broadcast::Receiver<Notice>,
    pending: VecDeque<Bytes>,
    last_rv: u64,
    deadline: Pin<Box<Sleep>>,
    ticker: Interval,
    shutdown: CancellationToken,
    done: bool,
}

impl Watch {
    fn push_line(&mut self, ty: &str, object: Bytes) {
        let prefix = format!("{{\"type\":\"{ty}\",\"object\":");
        if object.len() > COPY_LIMIT {
            self.pending.push_back(Bytes::from(prefix));
            self.pending.push_back(object);
            self.pending.push_back(Bytes::from_static(b"}\n"));
        } else {
            let mut line = Vec::with_capacity(prefix.len() + object.len() + 2);
            line.extend_from_slice(prefix.as_bytes());
            line.extend_from_slice(&object);
            line.extend_from_slice(b"}\n");
            self.pending.push_back(Bytes::from(line));
        }
    }

    fn push_bookmark(&mut self, rv: u64) {
        let (api_version, kind) = if self.spec.partial {
            ("meta.k8s.io/v1", "PartialObjectMetadata")
        } else {
            (self.spec.api_version.as_str(), self.spec.kind.as_str())
        };
        let metadata = json!({ "resourceVersion": rv.to_string() });
        let object = json!({ "kind": kind, "apiVersion": api_version, "metadata": metadata });
        self.push_line("BOOKMARK", Bytes::from(object.to_string()));
    }

    fn push_expired(&mut self, message: &str) {
        let status = ApiError::expired(message).to_status();
        self.push_line("ERROR", Bytes::from(status.to_string()));
        self.done = true;
    }

    fn on_notice(&mut self, notice: &Notice) {
        self.last_rv = self.last_rv.max(notice.rv);
        if *notice.resource != *self.spec.resource {
            return;
        }
        match notice.event.upgrade() {
            Some(ev) => self.on_event(&ev),
            None => {
                self.push_expired("too old resource version: the watch fell behind the history")
            }
        }
    }

    fn on_event(&mut self, ev: &WatchEvent) {
        if *ev.resource != *self.spec.resource {
            return;
        }
        let filter = &self.spec.filter;
        let now = filter.matches(&ev.filter);
        let ty = match ev.kind {
            EventType::Added | EventType::Deleted => now.then_some(ev.kind),
            EventType::Modified => {
                let before = ev.prev_filter.as_ref().is_some_and(|p| filter.matches(p));
                match (before, now) {
                    (true, true) => Some(EventType::Modified),
                    (false, true) => Some(EventType::Added),
                    (true, false) => Some(EventType::Deleted),
                    (false, false) => None,
                }
            }
        };
        if let Some(ty) = ty {
            let object = if self.spec.partial {
                ev.partial()
            } else {
                ev.object.clone()
            };
            self.push_line(ty.as_str(), object);
        }
    }

    /// Takes every event already queued, so a bookmark is not older than
    /// what the client could have been sent.
    fn drain(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(notice) => self.on_notice(&notice),
                Err(TryRecvError::Lagged(_)) => {
                    self.push_expired("watch fell behind: too old resource version");
                    return;
                }
                Err(_) => return,
            }
        }
    }

    async fn step(&mut self) {
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => self.done = true,
            () = &mut self.deadline => {
                self.drain();
                if self.spec.bookmarks && !self.done {
                    self.push_bookmark(self.last_rv);
                }
                self.done = true;
            }
            r = self.rx.recv() => match r {
                Ok(notice) => self.on_notice(&notice),
                Err(RecvError::Lagged(_)) => {
                    self.push_expired("watch fell behind: too old resource version");
                }
                Err(RecvError::Closed) => self.done = true,
            },
            _ = self.ticker.tick(), if self.spec.bookmarks => {
                self.drain();
                if !self.done {
                    self.push_bookmark(self.last_rv);
                }
            }
        }
    }
}

/// The chunks of a watch that starts at `start`.
pub(crate) fn stream(
    start: WatchStart,
    spec: WatchSpec,
    shutdown: CancellationToken,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let now = tokio::time::Instant::now();
    let mut ticker = tokio::time::interval_at(now + spec.bookmark_interval, spec.bookmark_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut watch = Watch {
        deadline: Box::pin(tokio::time::sleep(spec.lifetime)),
        spec,
        rx: start.rx,
        pending: VecDeque::new(),
        last_rv: start.rv,
        ticker,
        shutdown,
        done: false,
    };
    for (object, _) in start.initial {
        let object = if watch.spec.partial {
            partial_metadata(&object)
        } else {
            object
        };
        watch.push_line("ADDED", object);
    }
    for ev in &start.replay {
        watch.on_event(ev);
    }
    futures::stream::unfold(watch, |mut w| async move {
        loop {
            if let Some(chunk) = w.pending.pop_front() {
                return Some((chunk, w));
            }
            if w.done {
                return None;
            }
            w.step().await;
        }
    })
}
