//! What the bench sees of the server, through watches as any client sees it:
//! when each ConfigMap changed (the published document is "published" when
//! its watch delivers it to a reader, on the mock as on a real API server),
//! when each pod first carried a tracked annotation, the ShardGroups' status
//! as last delivered, and a count of every change in the namespace (the
//! operator's writes at steady state). Each event is stamped when the watch
//! delivers it, before anything else looks at it.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use shardring::crds::ShardGroup;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// A ShardGroup's status as a watch delivered it.
#[derive(Debug, Clone, Default)]
pub struct GroupSeen {
    /// When it arrived.
    pub at: Option<Instant>,
    /// `status.epoch`.
    pub epoch: u64,
    /// `status.movesInFlight`.
    pub moves_in_flight: u64,
    /// `status.pods.eligible`.
    pub eligible: u64,
    /// Whether `Ready` is `True` with reason `Published`.
    pub published: bool,
}

/// Everything the watches delivered so far.
#[derive(Default)]
pub struct State {
    /// Each ConfigMap's changes since the watch started: (arrival, resourceVersion).
    pub config_maps: HashMap<String, Vec<(Instant, String)>>,
    /// Each ConfigMap as last delivered.
    pub latest: HashMap<String, Arc<ConfigMap>>,
    /// Per tracked annotation key, when each pod was first seen with it.
    pub annotated: HashMap<String, HashMap<String, Instant>>,
    /// The ShardGroups by (namespace, name).
    pub groups: HashMap<(String, String), GroupSeen>,
    /// Changes delivered after the initial lists (pods, ConfigMaps,
    /// ShardGroups, Events), and when the last arrived.
    pub changes: u64,
    /// When the last change arrived.
    pub last_change: Option<Instant>,
    /// Watches whose initial list is complete.
    pub synced: usize,
}

/// Watches feeding one [`State`].
pub struct Timeline {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// One event of a watch, as [`Timeline::spawn`] passes it on.
enum Seen<'a, K> {
    /// Part of the initial list.
    Listed(&'a K),
    /// Created or changed.
    Changed(&'a K),
    /// Deleted.
    Deleted(&'a K),
}

impl Timeline {
    /// Watches of namespace `ns`: its ConfigMaps, its pods' annotations
    /// `keys`, its ShardGroups and its Events.
    pub async fn namespace(client: &Client, ns: &str, keys: &[&str]) -> Self {
        let mut timeline = Self::empty();
        {
            let mut state = timeline.lock();
            for key in keys {
                state.annotated.insert((*key).to_owned(), HashMap::new());
            }
        }
        let config_maps = watcher(Api::<ConfigMap>::namespaced(client.clone(), ns));
        timeline.spawn(config_maps, |state, at, seen| match seen {
            Seen::Listed(cm) | Seen::Changed(cm) => {
                let name = cm.name_any();
                state
                    .config_maps
                    .entry(name.clone())
                    .or_default()
                    .push((at, cm.resource_version().unwrap_or_default()));
                state.latest.insert(name, Arc::new(cm.clone()));
            }
            Seen::Deleted(cm) => {
                state.latest.remove(&cm.name_any());
            }
        });
        let pods = watcher(Api::<PartialObjectMeta<Pod>>::namespaced(
            client.clone(),
            ns,
        ));
        timeline.spawn(pods, |state, at, seen| {
            if let Seen::Listed(pod) | Seen::Changed(pod) = seen {
                let annotations = pod.annotations();
                for (key, seen) in &mut state.annotated {
                    if annotations.contains_key(key) {
                        seen.entry(pod.name_any()).or_insert(at);
                    }
                }
            }
        });
        let groups = watcher(Api::<ShardGroup>::namespaced(client.clone(), ns));
        timeline.spawn(groups, record_group);
        let events = watcher(Api::<PartialObjectMeta<CoreEvent>>::namespaced(
            client.clone(),
            ns,
        ));
        timeline.spawn(events, |_, _, _| {});
        timeline.wait_synced(4).await;
        timeline
    }

    /// A watch of every ShardGroup of the cluster.
    pub async fn all_groups(client: &Client) -> Self {
        let mut timeline = Self::empty();
        timeline.spawn(
            watcher(Api::<ShardGroup>::all(client.clone())),
            record_group,
        );
        timeline.wait_synced(1).await;
        timeline
    }

    fn empty() -> Self {
        Self {
            state: Arc::default(),
            changed: Arc::new(Notify::new()),
            tasks: Vec::new(),
        }
    }

    /// Runs `stream`, stamping each event on arrival and handing it to `on`.
    fn spawn<K, F>(
        &mut self,
        stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
        on: F,
    ) where
        K: Send + 'static,
        F: Fn(&mut State, Instant, Seen<'_, K>) + Send + 'static,
    {
        let (state, changed) = (self.state.clone(), self.changed.clone());
        self.tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let at = Instant::now();
                let Ok(event) = event else { continue };
                {
                    let mut state = state.lock();
                    match &event {
                        Event::InitApply(object) => on(&mut state, at, Seen::Listed(object)),
                        Event::Apply(object) => {
                            state.changes += 1;
                            state.last_change = Some(at);
                            on(&mut state, at, Seen::Changed(object));
                        }
                        Event::Delete(object) => {
                            state.changes += 1;
                            state.last_change = Some(at);
                            on(&mut state, at, Seen::Deleted(object));
                        }
                        Event::InitDone => state.synced += 1,
                        Event::Init => {}
                    }
                }
                changed.notify_waiters();
            }
        }));
    }

    async fn wait_synced(&self, watches: usize) {
        self.wait(Duration::from_secs(300), |s| {
            (s.synced >= watches).then_some(())
        })
        .await
        .expect("the bench's watches never listed");
    }

    /// The state, locked.
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Waits until `check` returns something (checked at every delivered
    /// event), or `None` after `deadline`.
    pub async fn wait<T>(
        &self,
        deadline: Duration,
        check: impl Fn(&State) -> Option<T>,
    ) -> Option<T> {
        let until = Instant::now() + deadline;
        loop {
            let notified = self.changed.notified();
            if let Some(found) = check(&self.lock()) {
                return Some(found);
            }
            let left = until.checked_duration_since(Instant::now())?;
            // A timer too, so that conditions on elapsed quiet are rechecked.
            let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), notified).await;
        }
    }

    /// When ConfigMap `name` first changed at or after `since`, waiting up
    /// to `deadline`; also its resourceVersion then.
    pub async fn config_map_change(
        &self,
        name: &str,
        since: Instant,
        deadline: Duration,
    ) -> Option<(Instant, String)> {
        self.wait(deadline, |s| {
            s.config_maps
                .get(name)?
                .iter()
                .find(|(at, _)| *at >= since)
                .cloned()
        })
        .await
    }

    /// When ConfigMap `name` was delivered at resourceVersion `version`.
    pub async fn config_map_at(
        &self,
        name: &str,
        version: &str,
        deadline: Duration,
    ) -> Option<Instant> {
        self.wait(deadline, |s| {
            s.config_maps
                .get(name)?
                .iter()
                .find(|(_, v)| v == version)
                .map(|(at, _)| *at)
        })
        .await
    }

    /// When the last of `pods` pods was first seen carrying `key`.
    pub async fn all_annotated(
        &self,
        key: &str,
        pods: usize,
        deadline: Duration,
    ) -> Option<Instant> {
        self.wait(deadline, |s| {
            let seen = s.annotated.get(key)?;
            (seen.len() >= pods)
                .then(|| seen.values().max().copied())
                .flatten()
        })
        .await
    }
}

fn watcher<K>(api: Api<K>) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watcher(api, watcher::Config::default())
}

fn record_group(state: &mut State, at: Instant, seen: Seen<'_, ShardGroup>) {
    let (Seen::Listed(group) | Seen::Changed(group)) = seen else {
        return;
    };
    let key = (group.namespace().unwrap_or_default(), group.name_any());
    let status = group.status.clone().unwrap_or_default();
    let published = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True" && c.reason == "Published");
    state.groups.insert(
        key,
        GroupSeen {
            at: Some(at),
            epoch: status.epoch,
            moves_in_flight: status.moves_in_flight,
            eligible: status.pods.eligible,
            published,
        },
    );
}
