//! Reads: get, paginated lists over a consistent snapshot kept behind an
//! opaque continue token, and the start of a watch (the replay from history
//! or the synthetic initial state, and a broadcast subscription taken under
//! the same lock so no write falls between them).

use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

use super::super::meta::random_u64;
use super::super::resources::ResourceType;
use super::super::selector::{Filter, FilterKey};
use super::super::status::ApiError;
use super::{Notice, Snapshot, Store, WatchEvent, obj_key};

/// One page of a list.
#[derive(Debug)]
pub(crate) struct Page {
    /// The snapshot's resourceVersion (the same on every page).
    pub rv: u64,
    /// The items of this page, sorted by namespace and name.
    pub items: Vec<Arc<Value>>,
    /// Token of the next page, when more items remain.
    pub continue_token: Option<String>,
    /// Items after this page, when more remain.
    pub remaining: Option<usize>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFrom {
    /// Synthetic ADDED events for the current state, then live events
    /// (`resourceVersion` absent, "" or "0", or `sendInitialEvents`).
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

fn encode_token(id: &str, offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("{id}:{offset}"))
}

fn decode_token(token: &str) -> Option<(String, usize)> {
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(token).ok()?).ok()?;
    let (id, offset) = raw.split_once(':')?;
    Some((id.to_owned(), offset.parse().ok()?))
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

    /// One page of the objects `filter` selects: the first page (no
    /// `continue_token`) snapshots them at the current resourceVersion.
    pub fn list(
        &self,
        rt: &ResourceType,
        filter: &Filter,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<Page, ApiError> {
        let mut state = self.lock();
        let ttl = self.snapshot_ttl;
        state.snapshots.retain(|_, s| s.created.elapsed() < ttl);
        let limit = limit.filter(|l| *l > 0);
        let (rv, items, offset, id) = match continue_token.filter(|t| !t.is_empty()) {
            Some(token) => {
                let (id, offset) = decode_token(token)
                    .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
                let snapshot = state.snapshots.get(&id).ok_or_else(|| {
                    ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    )
                })?;
                if *snapshot.resource != *rt.key() {
                    return Err(ApiError::bad_request(
                        "continue key is for another resource",
                    ));
                }
                (snapshot.rv, snapshot.items.clone(), offset, Some(id))
            }
            None => {
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
                (state.rv, items, 0, None)
            }
        };
        let end = limit.map_or(items.len(), |l| (offset + l).min(items.len()));
        let page: Vec<Arc<Value>> = items.get(offset..end).unwrap_or_default().to_vec();
        if end >= items.len() {
            if let Some(id) = id {
                state.snapshots.remove(&id);
            }
            return Ok(Page {
                rv,
                items: page,
                continue_token: None,
                remaining: None,
            });
        }
        let remaining = items.len() - end;
        let id = id.unwrap_or_else(|| {
            let id = format!("{:016x}", random_u64());
            state.snapshots.insert(
                id.clone(),
                Snapshot {
                    resource: rt.key(),
                    rv,
                    items,
                    created: Instant::now(),
                },
            );
            id
        });
        Ok(Page {
            rv,
            items: page,
            continue_token: Some(encode_token(&id, end)),
            remaining: Some(remaining),
        })
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
