//! Reads: get, lists (every matching item in one answer: `limit` is not
//! emulated, which a client must accept from any server, and paging is
//! checked on the real control plane, `e2e/tests/it/api_semantics.rs`), and
//! the start of a watch (the replay from history
//! or the synthetic initial state, and a broadcast subscription taken under
//! the same lock so no write falls between them).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

use super::super::resources::ResourceType;
use super::super::selector::{Filter, FilterKey};
use super::super::status::ApiError;
use super::{Notice, Store, WatchEvent, obj_key};

/// A list's answer.
#[derive(Debug)]
pub(crate) struct Page {
    /// The resourceVersion the list was read at.
    pub rv: u64,
    /// The items, sorted by namespace and name.
    pub items: Vec<Arc<Value>>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFrom {
    /// Synthetic ADDED events for the current state, then live events
    /// (`resourceVersion` absent, "" or "0").
    Current,
    /// Every event after this resourceVersion, then live events.
    After(u64),
}

/// What a watch sends before live events, and its subscription.
#[derive(Debug)]
pub(crate) struct WatchStart {
    /// Current objects matching the filter, as synthetic ADDED events.
    pub initial: Vec<(Bytes, Arc<FilterKey>)>,
    /// Events to replay (not yet filtered).
    pub replay: Vec<Arc<WatchEvent>>,
    /// Live events after `rv`.
    pub rx: broadcast::Receiver<Notice>,
    /// The resourceVersion the watch is at once `initial`/`replay` is sent.
    pub rv: u64,
}

impl Store {
    /// The object, if stored.
    pub fn get(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
    ) -> Option<(Arc<Value>, Bytes)> {
        let state = self.lock();
        state
            .entry(rt, &obj_key(rt, ns, name))
            .map(|e| (e.obj.clone(), e.bytes.clone()))
    }

    /// Every object `filter` selects, at the current resourceVersion.
    pub fn list(&self, rt: &ResourceType, filter: &Filter) -> Page {
        let state = self.lock();
        let items: Vec<Arc<Value>> = match state.collections.get(&rt.key()) {
            None => Vec::new(),
            Some(c) => match filter.namespace.as_deref().filter(|_| rt.namespaced) {
                Some(ns) => c
                    .objects
                    .range((ns.to_owned(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .filter(|(_, e)| filter.matches(&e.filter))
                    .map(|(_, e)| e.obj.clone())
                    .collect(),
                None => c
                    .objects
                    .values()
                    .filter(|e| filter.matches(&e.filter))
                    .map(|e| e.obj.clone())
                    .collect(),
            },
        };
        Page {
            rv: state.rv,
            items,
        }
    }

    /// Starts a watch: the replay or initial state, and the subscription to
    /// what follows. A resourceVersion older than the history keeps is 410.
    pub fn start_watch(
        &self,
        rt: &ResourceType,
        filter: &Filter,
        from: WatchFrom,
    ) -> Result<WatchStart, ApiError> {
        let state = self.lock();
        let rx = state.tx.subscribe();
        let coll = state.collections.get(&rt.key());
        let mut initial = Vec::new();
        let mut replay = Vec::new();
        match from {
            WatchFrom::Current => {
                if let Some(c) = coll {
                    initial = c
                        .objects
                        .values()
                        .filter(|e| filter.matches(&e.filter))
                        .map(|e| (e.bytes.clone(), e.filter.clone()))
                        .collect();
                }
            }
            WatchFrom::After(rv) => {
                if let Some(c) = coll {
                    if rv < c.history.compacted {
                        return Err(ApiError::expired(format!(
                            "too old resource version: {rv} ({})",
                            c.history.compacted + 1
                        )));
                    }
                    let events = &c.history.events;
                    let start = events.partition_point(|e| e.rv <= rv);
                    replay = events.range(start..).cloned().collect();
                }
            }
        }
        Ok(WatchStart {
            initial,
            replay,
            rx,
            rv: state.rv,
        })
    }

    /// Every stored object of `rt` in `ns` (all when `None`), sorted.
    pub fn all(&self, rt: &ResourceType, ns: Option<&str>) -> Vec<Value> {
        let state = self.lock();
        state
            .collections
            .get(&rt.key())
            .map(|c| {
                c.objects
                    .iter()
                    .filter(|((n, _), _)| ns.is_none_or(|ns| !rt.namespaced || n == ns))
                    .map(|(_, e)| (*e.obj).clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}
