//! What the controller watches: every namespace, or a chosen set of them
//! (`--watch-namespaces`, for clusters that grant the operator Roles in
//! those namespaces only), as one stream of watcher events per resource.
//!
//! Why a merge of its own: the API server lists and watches either one
//! namespace or all of them (a field selector cannot say "namespace a or
//! b"), and kube's reflector store takes one watcher: a second watcher's
//! relist (`Init` … `InitDone`) would replace the first one's objects. So
//! each namespace has its own watcher (and its own backoff), and the merge
//! hands the store one initial list, complete when every namespace has
//! listed, after which a namespace's relist reaches the store as what it
//! changed: `Apply` for each object listed, `Delete` for each object of that
//! namespace the relist no longer has. To know what a relist no longer has,
//! each namespace's part keeps the objects it handed on: with several
//! namespaces the watched objects are held twice (the stores', the
//! merge's); one namespace, or all, go straight to the store as before.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;

use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use shardring_backoff::watch::watch_backoff;

/// The namespaces the controller watches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WatchScope {
    /// Every namespace (cluster-wide list and watch).
    #[default]
    All,
    /// Only these (at least one, sorted, no duplicates).
    Namespaces(Vec<String>),
}

impl WatchScope {
    /// The scope of `namespaces` (empty: all).
    pub fn of(namespaces: impl IntoIterator<Item = String>) -> Self {
        let mut list: Vec<String> = namespaces
            .into_iter()
            .map(|ns| ns.trim().to_owned())
            .filter(|ns| !ns.is_empty())
            .collect();
        list.sort();
        list.dedup();
        if list.is_empty() {
            WatchScope::All
        } else {
            WatchScope::Namespaces(list)
        }
    }
}

type Events<K> = BoxStream<'static, watcher::Result<watcher::Event<K>>>;

/// The watcher events of `K` in `scope` with `config`, each namespace's
/// watch retrying on the consumer's schedule ([`watch_backoff`]).
pub(crate) fn scoped_watcher<K>(
    client: &Client,
    scope: &WatchScope,
    config: watcher::Config,
) -> Events<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let watch = |api: Api<K>| watcher(api, config.clone()).backoff(watch_backoff());
    match scope {
        WatchScope::All => watch(Api::all(client.clone())).boxed(),
        WatchScope::Namespaces(list) if list.len() == 1 => {
            watch(Api::namespaced(client.clone(), &list[0])).boxed()
        }
        WatchScope::Namespaces(list) => {
            let tagged = list.iter().enumerate().map(|(index, ns)| {
                watch(Api::namespaced(client.clone(), ns))
                    .map(move |event| (index, event))
                    .boxed()
            });
            merge(list.len(), stream::select_all(tagged)).boxed()
        }
    }
}

/// One namespace's part of the merge.
struct Part<K> {
    /// Its objects as the store has them, by name.
    known: BTreeMap<String, K>,
    /// The objects of a list in progress.
    listing: Option<BTreeMap<String, K>>,
    /// Whether its first list completed.
    listed: bool,
}

/// The merge of `parts` namespaces' tagged events (see the module header).
fn merge<K, S>(parts: usize, inner: S) -> impl Stream<Item = watcher::Result<watcher::Event<K>>>
where
    K: Resource + Clone + Send + 'static,
    S: Stream<Item = (usize, watcher::Result<watcher::Event<K>>)> + Unpin + Send + 'static,
{
    let state = Merge {
        parts: (0..parts)
            .map(|_| Part {
                known: BTreeMap::new(),
                listing: None,
                listed: false,
            })
            .collect(),
        initial_done: false,
        out: VecDeque::from([Ok(watcher::Event::Init)]),
        inner,
    };
    stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.out.pop_front() {
                return Some((event, state));
            }
            let (index, event) = state.inner.next().await?;
            state.take(index, event);
        }
    })
}

struct Merge<K, S> {
    parts: Vec<Part<K>>,
    /// Whether the merged initial list was handed on.
    initial_done: bool,
    out: VecDeque<watcher::Result<watcher::Event<K>>>,
    inner: S,
}

impl<K: Resource + Clone, S> Merge<K, S> {
    /// Takes one event of namespace `index`, queueing what it means for the
    /// store.
    fn take(&mut self, index: usize, event: watcher::Result<watcher::Event<K>>) {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                self.out.push_back(Err(error));
                return;
            }
        };
        let part = &mut self.parts[index];
        match event {
            watcher::Event::Init => part.listing = Some(BTreeMap::new()),
            watcher::Event::InitApply(object) => {
                part.listing
                    .get_or_insert_default()
                    .insert(object.name_any(), object);
            }
            watcher::Event::InitDone => {
                let listed = part.listing.take().unwrap_or_default();
                part.listed = true;
                if self.initial_done {
                    for (name, object) in &part.known {
                        if !listed.contains_key(name) {
                            self.out
                                .push_back(Ok(watcher::Event::Delete(object.clone())));
                        }
                    }
                    for object in listed.values() {
                        self.out
                            .push_back(Ok(watcher::Event::Apply(object.clone())));
                    }
                    part.known = listed;
                } else {
                    part.known = listed;
                    if self.parts.iter().all(|p| p.listed) {
                        self.initial_done = true;
                        for part in &self.parts {
                            for object in part.known.values() {
                                self.out
                                    .push_back(Ok(watcher::Event::InitApply(object.clone())));
                            }
                        }
                        self.out.push_back(Ok(watcher::Event::InitDone));
                    }
                }
            }
            watcher::Event::Apply(object) => {
                part.known.insert(object.name_any(), object.clone());
                if self.initial_done {
                    self.out.push_back(Ok(watcher::Event::Apply(object)));
                }
            }
            watcher::Event::Delete(object) => {
                part.known.remove(&object.name_any());
                if self.initial_done {
                    self.out.push_back(Ok(watcher::Event::Delete(object)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};

    fn cm(ns: &str, name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// What the merge hands on for `events`, as `kind ns/name@version`.
    fn merged(events: Vec<(usize, watcher::Event<ConfigMap>)>) -> Vec<String> {
        let inner = stream::iter(events.into_iter().map(|(i, e)| (i, Ok(e))));
        let out: Vec<_> = futures::executor::block_on(merge(2, inner).collect::<Vec<_>>());
        out.into_iter()
            .map(|event| {
                let show = |kind: &str, cm: &ConfigMap| {
                    format!(
                        "{kind} {}/{}@{}",
                        cm.namespace().unwrap_or_default(),
                        cm.name_any(),
                        cm.resource_version().unwrap_or_default()
                    )
                };
                match event.expect("no errors sent") {
                    Init => "init".to_owned(),
                    InitDone => "init-done".to_owned(),
                    InitApply(cm) => show("init-apply", &cm),
                    Apply(cm) => show("apply", &cm),
                    Delete(cm) => show("delete", &cm),
                }
            })
            .collect()
    }

    #[test]
    fn the_initial_list_is_complete_only_when_every_namespace_listed() {
        let out = merged(vec![
            (0, Init),
            (0, InitApply(cm("a", "x", "1"))),
            (0, InitDone),
            // A change in `a` before `b` listed goes into the initial list.
            (0, Apply(cm("a", "x", "2"))),
            (1, Init),
            (1, InitApply(cm("b", "y", "1"))),
            (1, InitDone),
            (1, Apply(cm("b", "y", "2"))),
        ]);
        assert_eq!(
            out,
            [
                "init",
                "init-apply a/x@2",
                "init-apply b/y@1",
                "init-done",
                "apply b/y@2"
            ]
        );
    }

    #[test]
    fn a_first_list_restarted_before_it_completed_keeps_only_the_second() {
        let out = merged(vec![
            (0, Init),
            (0, InitApply(cm("a", "gone", "1"))),
            (0, Init),
            (0, InitApply(cm("a", "x", "1"))),
            (0, InitDone),
            (1, Init),
            (1, InitDone),
        ]);
        assert_eq!(out, ["init", "init-apply a/x@1", "init-done"]);
    }

    #[test]
    fn a_relist_of_one_namespace_is_what_it_changed_and_leaves_the_other_alone() {
        let out = merged(vec![
            (0, Init),
            (0, InitApply(cm("a", "x", "1"))),
            (0, InitApply(cm("a", "z", "1"))),
            (0, InitDone),
            (1, Init),
            (1, InitApply(cm("b", "y", "1"))),
            (1, InitDone),
            // `a`'s watch expired and relisted: z was deleted meanwhile.
            (0, Init),
            (0, InitApply(cm("a", "x", "3"))),
            (0, InitDone),
            (1, Delete(cm("b", "y", "2"))),
        ]);
        assert_eq!(
            out,
            [
                "init",
                "init-apply a/x@1",
                "init-apply a/z@1",
                "init-apply b/y@1",
                "init-done",
                "delete a/z@1",
                "apply a/x@3",
                "delete b/y@2",
            ]
        );
    }

    #[test]
    fn a_scope_is_sorted_without_duplicates_and_empty_means_all() {
        assert_eq!(WatchScope::of(Vec::<String>::new()), WatchScope::All);
        assert_eq!(WatchScope::of([" ".to_owned()]), WatchScope::All);
        let scope = WatchScope::of(["b".into(), "a".into(), "b".into()]);
        assert_eq!(scope, WatchScope::Namespaces(vec!["a".into(), "b".into()]));
    }
}
