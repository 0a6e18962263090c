//! The pools' deals, for the observe step: one core [`PoolBook`] per
//! ConsumerPool (namespace and name), and what feeds it: the count-mode
//! ShardGroups that reference the pool (the ShardGroup store) with their
//! published documents (the document cache: a group's own write is there
//! as soon as it went out, so a peer never deals from a document this
//! operator has already replaced).
//!
//! It also writes each pool's status (its groups, shards, pods and the
//! fewest and most shards one Ready pod reads over all its groups) after a
//! group's writes, when it changed ([`Pools::publish_status`]).
//!
//! A new deal that changes another group's row asks that group to
//! reconcile ([`ReconcileRequests`]): a pod event wakes every group of the
//! pool anyway, but a group that joins, leaves or changes its shard count
//! wakes only itself. The books are this replica's memory and nothing
//! else: one lost (a restart, a new leader) is dealt again from the
//! documents, which at rest are the deal.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, Store};
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;
use shardring_core::identity::identities;
use shardring_core::observation::{Observation, Published};
use shardring_core::pool::{PoolBook, PoolMember, PoolPods, deals, holdings_in, readable_in};
use shardring_core::pool_conditions::{PoolCounts, pool_conditions};

use super::observe::Stores;
use crate::GroupKey;
use crate::crds::{AssignmentDocument, ConsumerPool, ConsumerPoolStatus, ShardGroup};
use crate::endpoint::ReconcileRequests;

/// Every pool's book, and the store of the groups that reference them.
#[derive(Clone)]
pub struct Pools {
    groups: Store<DeserializeGuard<ShardGroup>>,
    books: Arc<Mutex<HashMap<(String, String), PoolBook>>>,
    requests: ReconcileRequests,
    /// The status last written per pool: an unchanged one is not written.
    written: Arc<Mutex<HashMap<(String, String), ConsumerPoolStatus>>>,
}

/// A group that references a pool, as the pool sees it.
struct Member {
    key: GroupKey,
    /// Whether it takes part in the pool's deal ([`deals`]).
    deals: bool,
    /// Its partition count, for a static source.
    static_count: Option<u32>,
    /// The ConfigMap of its document.
    config_map: String,
}

/// The freshest document known of `member`: of the one this operator last
/// wrote or decoded (the group table's) and the one the ConfigMap cache
/// holds (decoded once per version), the higher epoch. The table's can be
/// behind (a write whose stored content differed is not kept), the cache's
/// lags a write for a moment; epochs only grow.
fn freshest(stores: &Stores, member: &Member) -> Option<Arc<AssignmentDocument>> {
    let table = stores.documents.latest(&member.key);
    let cache = match stores.published_in(&member.key, &member.config_map).0 {
        Published::Document(doc) => Some(doc),
        _ => None,
    };
    match (table, cache) {
        (Some(table), Some(cache)) => Some(if cache.epoch > table.epoch {
            cache
        } else {
            table
        }),
        (table, cache) => table.or(cache),
    }
}

/// Field manager of the pool status writes.
const POOL_MANAGER: &str = "shardring-pool";

/// What a group's observe step saw of its pool, for the pool's status.
#[derive(Debug, Clone)]
pub(crate) struct PoolSeen {
    pool: ConsumerPool,
    selected: u64,
    ready: u64,
    /// The pool's eligible pods (Ready for minReadySeconds, not terminating).
    eligible: Vec<String>,
    /// When it was seen (its conditions' transition time).
    now: jiff::Timestamp,
}

impl PoolSeen {
    /// The pool's name.
    pub(crate) fn name(&self) -> String {
        self.pool.name_any()
    }

    /// What `obs` shows of its pool, when it has one.
    pub(crate) fn of(obs: &Observation) -> Option<Self> {
        let pool = obs.pool.clone()?;
        let min_ready = pool.spec.min_ready();
        let selected = obs.pods.iter().filter(|p| p.selected);
        Some(Self {
            selected: selected.clone().count() as u64,
            ready: selected.clone().filter(|p| p.ready).count() as u64,
            eligible: selected
                .filter(|p| shardring_core::plan::eligible(p, min_ready, obs.now))
                .map(|p| p.name.clone())
                .collect(),
            now: obs.now,
            pool,
        })
    }
}

impl Default for Pools {
    /// No groups known: every group is planned alone.
    fn default() -> Self {
        Self::new(reflector::store().0)
    }
}

impl Pools {
    /// Pools whose members come from the ShardGroup store `groups`.
    pub fn new(groups: Store<DeserializeGuard<ShardGroup>>) -> Self {
        Self {
            groups,
            books: Arc::default(),
            requests: ReconcileRequests::default(),
            written: Arc::default(),
        }
    }

    /// The ShardGroup store the pools read their members from.
    pub(crate) fn groups(&self) -> &Store<DeserializeGuard<ShardGroup>> {
        &self.groups
    }

    /// Where the groups whose rows a new deal changed are asked for.
    pub fn requests(&self) -> &ReconcileRequests {
        &self.requests
    }

    /// Sets `obs.ceilings` to the group's row of its pool's deal (left
    /// `None` for a group planned alone), asking the groups whose rows the
    /// deal changed to reconcile.
    pub fn deal_into(&self, stores: &Stores, obs: &mut Observation) {
        let group = &obs.group;
        let Some(pool) = &obs.pool else { return };
        if !deals(group) {
            return;
        }
        let namespace = group.namespace().unwrap_or_default();
        let own = GroupKey::of(group).to_string();
        let peers = self.peers(&namespace, &group.spec.pool_ref.name);
        let mut documents: BTreeMap<String, Arc<AssignmentDocument>> = BTreeMap::new();
        let mut members = Vec::with_capacity(peers.len() + 1);
        for peer in &peers {
            let name = peer.key.to_string();
            if name == own {
                continue;
            }
            // The peer's freshest document ([`freshest`]); a peer that has
            // published nothing holds nothing yet, but it is dealt its share from the
            // start (groups created together must not each be planned alone
            // first): with its static count, or what its own reconcile
            // reported to the book (0 until then).
            let known = freshest(stores, peer);
            let readable = match known {
                Some(doc) => {
                    let readable = readable_in(&doc);
                    documents.insert(name.clone(), doc);
                    readable
                }
                None => peer.static_count.map_or(0, u64::from),
            };
            members.push(PoolMember {
                group: name,
                readable,
            });
        }
        if members.is_empty() {
            return;
        }
        let own_readable = match obs.published.document() {
            Some(doc) => readable_in(doc),
            None => obs.topology.last_good.as_ref().map_or(0, |t| {
                t.shards
                    .iter()
                    .filter(|s| s.state != crate::engine::ShardState::Complete)
                    .count() as u64
            }),
        };
        members.push(PoolMember {
            group: own.clone(),
            readable: own_readable,
        });
        let own_document = match &obs.published {
            Published::Document(doc) => Some(Arc::clone(doc)),
            _ => None,
        };
        let holdings = |name: &str| {
            if name == own {
                own_document.as_deref().map(holdings_in).unwrap_or_default()
            } else {
                documents
                    .get(name)
                    .map(|doc| holdings_in(doc))
                    .unwrap_or_default()
            }
        };
        // Pods away that the pool waits for are dealt to as if they were
        // here, from what every group of the pool holds for them.
        let all_documents: Vec<&AssignmentDocument> = own_document
            .as_deref()
            .into_iter()
            .chain(documents.values().map(Arc::as_ref))
            .collect();
        let returning = identities(
            pool,
            &obs.pods,
            &obs.stateful_sets,
            &obs.departed,
            &all_documents,
            obs.now,
        )
        .returning;
        let key = (namespace, group.spec.pool_ref.name.clone());
        let row = {
            let mut books = self.books.lock();
            let book = books.entry(key).or_default();
            book.row(
                &own,
                PoolPods {
                    pool,
                    pods: &obs.pods,
                    returning: &returning,
                },
                members,
                holdings,
                obs.now,
            )
        };
        let Some(row) = row else { return };
        for name in &row.changed {
            if let Some((ns, name)) = name.split_once('/') {
                self.requests.request(&GroupKey::new(ns, name));
            }
        }
        obs.ceilings = Some(row.ceilings);
    }

    /// A deleted group leaves its pool's deal: the pool's other groups are
    /// asked to reconcile, so its share is dealt to them again.
    pub(crate) fn forget(&self, group: &ShardGroup) {
        let namespace = group.namespace().unwrap_or_default();
        let gone = GroupKey::of(group);
        for peer in self.peers(&namespace, &group.spec.pool_ref.name) {
            if peer.key != gone {
                self.requests.request(&peer.key);
            }
        }
    }

    /// The groups of the store that reference pool `name` in `namespace`
    /// and take part in its deal.
    fn peers(&self, namespace: &str, name: &str) -> Vec<Member> {
        let mut members = self.referencing(namespace, name);
        members.retain(|m| m.deals);
        members
    }

    /// The groups of the store that reference pool `name` in `namespace`,
    /// as much of each as the pool needs (no copy of the groups).
    fn referencing(&self, namespace: &str, name: &str) -> Vec<Member> {
        self.groups
            .state()
            .iter()
            .filter_map(|guard| guard.0.as_ref().ok())
            .filter(|g| g.namespace().as_deref() == Some(namespace) && g.spec.pool_ref.name == name)
            .map(|g| Member {
                key: GroupKey::of(g),
                deals: deals(g),
                static_count: g.spec.source.static_source.as_ref().map(|s| s.count),
                config_map: g.config_map_name(),
            })
            .collect()
    }

    /// The status of the pool `seen` describes: its pods, its groups, and
    /// each eligible pod's active shards over every group's latest known
    /// document (`own`: the document `group` has just written).
    pub(crate) fn status(
        &self,
        stores: &Stores,
        seen: &PoolSeen,
        group: &GroupKey,
        own: Option<Arc<AssignmentDocument>>,
    ) -> ConsumerPoolStatus {
        let namespace = seen.pool.namespace().unwrap_or_default();
        let groups = self.referencing(&namespace, &seen.pool.name_any());
        let mut totals: BTreeMap<&str, u64> =
            seen.eligible.iter().map(|p| (p.as_str(), 0)).collect();
        let mut shards = 0;
        for peer in &groups {
            let doc = match &own {
                Some(own) if peer.key == *group => Some(Arc::clone(own)),
                _ => freshest(stores, peer),
            };
            let Some(doc) = doc else { continue };
            for (pod, entry) in &doc.pods {
                let active = entry.active.len() as u64;
                shards += active;
                if let Some(total) = totals.get_mut(pod.as_str()) {
                    *total += active;
                }
            }
        }
        let fewest = totals.values().min().copied();
        let most = totals.values().max().copied();
        let counts = PoolCounts {
            selected: seen.selected,
            eligible: seen.eligible.len() as u64,
            groups: groups.len() as u64,
            shards,
            spread: fewest.zip(most),
            min_ready_seconds: seen.pool.spec.min_ready_seconds,
        };
        // The conditions this replica last wrote, else the cached pool's:
        // the cache may not have the last write yet, and a transition time
        // taken from an older status would make an unchanged pool write.
        let written = self
            .written
            .lock()
            .get(&(namespace, seen.pool.name_any()))
            .map(|s| s.conditions.clone());
        let previous = written.unwrap_or_else(|| {
            seen.pool
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default()
        });
        let generation = seen.pool.metadata.generation;
        ConsumerPoolStatus {
            observed_generation: generation,
            pods: seen.selected,
            ready_pods: seen.ready,
            groups: counts.groups,
            shards,
            fewest_shards_per_pod: fewest,
            most_shards_per_pod: most,
            conditions: pool_conditions(&counts, generation, seen.now, &previous),
        }
    }

    /// Writes `status` to the pool `seen` describes unless it is the one
    /// last written (server-side apply of the status subresource, its own
    /// field manager). Best effort: a failure is logged and the next
    /// group's writes try again.
    pub(crate) async fn publish_status(
        &self,
        client: &Client,
        seen: &PoolSeen,
        status: ConsumerPoolStatus,
    ) {
        let namespace = seen.pool.namespace().unwrap_or_default();
        let name = seen.pool.name_any();
        let key = (namespace.clone(), name.clone());
        if self.written.lock().get(&key) == Some(&status) {
            return;
        }
        let body = serde_json::json!({
            "apiVersion": ConsumerPool::api_version(&()),
            "kind": ConsumerPool::kind(&()),
            "status": status,
        });
        let api: Api<ConsumerPool> = Api::namespaced(client.clone(), &namespace);
        let params = PatchParams::apply(POOL_MANAGER).force();
        match api.patch_status(&name, &params, &Patch::Apply(&body)).await {
            Ok(_) => {
                self.written.lock().insert(key, status);
            }
            Err(error) => {
                tracing::warn!(%error, pool = %name, "cannot write the ConsumerPool status");
            }
        }
    }
}
