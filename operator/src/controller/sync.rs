//! Which of the controller's caches hold a complete list, told by the watch
//! streams themselves (each reports the end of every full list it applied to
//! its store), never by a second waiter on a store.
//!
//! Two rules rest on it:
//! - no reconcile decides anything before every cache has completed its
//!   first list: a pod cache still filling says "0 pods" for a pool that has
//!   25, and a pool cache still filling maps a pod to no group at all;
//! - every completed list (the first, and each relist after a watch
//!   expired) triggers a reconcile of every ShardGroup: the events seen
//!   while a list was filling were mapped against caches that were not
//!   complete, so some group may never have heard of them.
//!
//! Readiness (`/readyz`) waits on the same signal.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::Stream;
use kube::runtime::watcher;
use tokio::sync::watch;

/// The names of the caches, as shown in logs and `/readyz`.
pub mod cache {
    /// ShardGroups (the controller's own store).
    pub(crate) const SHARD_GROUPS: &str = "shardgroups";
    /// ConsumerPools.
    pub(crate) const CONSUMER_POOLS: &str = "consumerpools";
    /// Pods.
    pub const PODS: &str = "pods";
    /// The ConfigMaps shardring manages.
    pub(crate) const CONFIG_MAPS: &str = "configmaps";
    /// Node metadata (zones).
    pub(crate) const NODES: &str = "nodes";
    /// StatefulSets (their replicas).
    pub(crate) const STATEFUL_SETS: &str = "statefulsets";
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    /// Caches that have not completed their first list.
    pending: BTreeSet<&'static str>,
    /// Full lists completed so far, by every cache together.
    lists: u64,
}

/// Shared sync state of one controller's caches. Clones share it.
#[derive(Debug, Clone)]
pub struct CacheSync {
    state: Arc<watch::Sender<State>>,
}

impl CacheSync {
    /// Tracks the caches named `caches`, none of them listed yet.
    pub fn new(caches: &[&'static str]) -> Self {
        let state = State {
            pending: caches.iter().copied().collect(),
            lists: 0,
        };
        Self {
            state: Arc::new(watch::Sender::new(state)),
        }
    }

    /// Records that `cache` completed a full list and applied it to its store.
    pub fn listed(&self, cache: &'static str) {
        self.state.send_modify(|state| {
            state.pending.remove(cache);
            state.lists += 1;
        });
    }

    /// Whether every cache has completed its first list.
    pub(crate) fn is_synced(&self) -> bool {
        self.state.borrow().pending.is_empty()
    }

    /// The caches that have not completed their first list yet.
    pub fn pending(&self) -> Vec<&'static str> {
        self.state.borrow().pending.iter().copied().collect()
    }

    /// Resolves once every cache has completed its first list.
    pub async fn synced(&self) {
        let mut rx = self.state.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|state| state.pending.is_empty()).await;
    }

    /// Emits `()` when every cache has completed its first list, and again
    /// after every later full list of any cache (a relist).
    pub(crate) fn lists_completed(&self) -> impl Stream<Item = ()> + Send + 'static {
        let rx = self.state.subscribe();
        futures::stream::unfold((rx, 0u64), |(mut rx, seen)| async move {
            loop {
                let lists = {
                    let state = rx.borrow_and_update();
                    state.pending.is_empty().then_some(state.lists)
                };
                if let Some(lists) = lists
                    && lists > seen
                {
                    return Some(((), (rx, lists)));
                }
                rx.changed().await.ok()?;
            }
        })
    }

    /// An `inspect` callback for a reflected watch stream of `cache`: marks
    /// the cache listed at every `InitDone`, which the reflector has applied
    /// to its store by the time the event passes.
    pub(crate) fn tracker<K>(
        &self,
        cache: &'static str,
    ) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) + Send + 'static {
        let sync = self.clone();
        move |event| {
            if let Ok(watcher::Event::InitDone) = event {
                tracing::debug!(cache, "cache listed");
                sync.listed(cache);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn synced_only_when_every_cache_listed_and_waiters_in_other_tasks_wake() {
        let sync = CacheSync::new(&[cache::PODS, cache::CONSUMER_POOLS]);
        // Several tasks wait at once: every one of them must wake (a store's
        // own readiness signal wakes only the last task that polled it).
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let sync = sync.clone();
                tokio::spawn(async move { sync.synced().await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(!sync.is_synced());
        sync.listed(cache::PODS);
        assert_eq!(sync.pending(), vec![cache::CONSUMER_POOLS]);
        sync.listed(cache::CONSUMER_POOLS);
        assert!(sync.is_synced());
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("every waiter wakes")
                .unwrap();
        }
    }

    #[tokio::test]
    async fn lists_completed_fires_at_full_sync_and_at_every_relist() {
        let sync = CacheSync::new(&[cache::PODS, cache::CONSUMER_POOLS]);
        let mut fired = Box::pin(sync.lists_completed());
        sync.listed(cache::PODS);
        let early = tokio::time::timeout(Duration::from_millis(50), fired.next()).await;
        assert!(early.is_err(), "not before every cache listed");
        sync.listed(cache::CONSUMER_POOLS);
        assert_eq!(fired.next().await, Some(()));
        // A relist of the pods (a watch expired) fires again.
        sync.listed(cache::PODS);
        assert_eq!(fired.next().await, Some(()));
        let idle = tokio::time::timeout(Duration::from_millis(50), fired.next()).await;
        assert!(idle.is_err(), "nothing more without a list");
    }
}
