//! The pools' deals, for the observe step: one core [`PoolBook`] per
//! ConsumerPool (namespace and name), and what feeds it: the count-mode
//! ShardGroups that reference the pool (the ShardGroup store) with their
//! published documents (the document cache: a group's own write is there
//! as soon as it went out, so a peer never deals from a document this
//! operator has already replaced).
//!
//! It also computes each pool's status (its groups, shards, pods and the
//! fewest and most shards one Ready pod reads over all its groups) after a
//! group's writes ([`Pools::status`]), for [`super::pool_status`] to write
//! when it changed ([`Pools::publish_status`]).
//!
//! A new deal that changes another group's row asks that group to
//! reconcile ([`ReconcileRequests`]): a pod event wakes every group of the
//! pool anyway, but a group that joins, leaves or changes its shard count
//! wakes only itself. The books are this replica's memory and nothing
//! else: one lost (a restart, a new leader) is dealt again from the
//! documents, which at rest are the deal.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use kube::core::DeserializeGuard;
use kube::runtime::reflector::{self, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use shardring_core::identity::identities;
use shardring_core::observation::{Observation, PodInfo, Published};
use shardring_core::pool::precedence::{BookKey, Precedence};
use shardring_core::pool::{Peer, PoolBook, PoolPods, domain_of, domains, readable_in};
use shardring_core::pool_conditions::{PoolCounts, pool_conditions};

use super::observe::Stores;
use super::pool_status::PoolStatusWrites;
use crate::GroupKey;
use crate::crds::shard_group::BalanceMode;
use crate::crds::{AssignmentDocument, ConsumerPool, ConsumerPoolStatus, ShardGroup};
use crate::endpoint::ReconcileRequests;
use crate::runtime::leader::LeaderGate;

/// Every balance's book, and the store of the groups that reference them.
#[derive(Clone)]
pub struct Pools {
    groups: Store<DeserializeGuard<ShardGroup>>,
    /// By namespace and the balance's pools (`a+b`).
    books: Arc<Mutex<HashMap<(String, String), PoolBook>>>,
    requests: ReconcileRequests,
    /// The pools' status writes: an unchanged status is not written, and
    /// one whose counts alone changed at most once per
    /// [`super::groups::STATUS_HOLD`].
    status_writes: PoolStatusWrites,
    /// The groups a new deal concerns reconcile before the others.
    precedence: Arc<Mutex<Precedence<Instant>>>,
    /// Told when a group first in line has its document out or ends
    /// ([`Pools::documents_first`]).
    documents_out: Arc<tokio::sync::Notify>,
    /// Shares taken so far (each ticket's number, taken under the books'
    /// lock: a reconcile that took its share after a deal has a higher one).
    shares_taken: Arc<AtomicU64>,
}

/// A group that references a pool, as the pool sees it.
struct Member {
    key: GroupKey,
    /// The pool it references.
    pool: String,
    balance: BalanceMode,
    standbys: u32,
    /// It has a deletion timestamp: it takes part in no deal.
    deleting: bool,
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

/// What a reconcile took from its balance's book: the book and the group,
/// to give the group's turn back when the reconcile ends.
#[derive(Debug, Clone)]
pub struct PoolTicket {
    book: BookKey,
    group: String,
    /// When it was taken ([`Pools::shares_taken`]).
    seq: u64,
}

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
    /// The other pools whose pods are balanced with this one's.
    balanced_with: Vec<String>,
    /// The group balances by throughput over the pool: the load spread
    /// its plan saw is the pool's.
    pooled_throughput: bool,
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
            balanced_with: obs
                .pool_share
                .balance
                .iter()
                .flat_map(|b| &b.pools)
                .filter(|name| **name != pool.name_any())
                .cloned()
                .collect(),
            pooled_throughput: obs.group.spec.balance.weighs_load()
                && obs
                    .pool_share
                    .balance
                    .as_ref()
                    .is_some_and(|b| b.groups > 1),
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
            status_writes: PoolStatusWrites::default(),
            precedence: Arc::default(),
            documents_out: Arc::default(),
            shares_taken: Arc::default(),
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

    /// Sets `obs.pool_share` to what the group takes from the balance of
    /// the pods it shares with other groups (left as it is, planned alone,
    /// when it shares them with none), asking the groups whose rows a new
    /// deal changed to reconcile. The ticket gives the group's turn back
    /// when its reconcile ends ([`Pools::done`]).
    pub fn deal_into(
        &self,
        stores: &Stores,
        loads: &crate::endpoint::Loads,
        obs: &mut Observation,
    ) -> Option<PoolTicket> {
        let group = &obs.group;
        let pool = obs.pool.as_ref()?;
        if group.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let namespace = group.namespace().unwrap_or_default();
        let own = GroupKey::of(group).to_string();
        // The common case costs nothing: a group alone in its namespace is
        // planned alone (no copy of its pods, no look at other pools).
        if !self.has_peers_in(&namespace, &own) {
            return None;
        }
        let balance = self.balance(stores, &namespace, pool, &obs.pods);
        let names: Vec<String> = balance.iter().map(|(p, _)| p.name_any()).collect();
        let peers_of = self.referencing_any(&namespace, &names);
        if peers_of.len() < 2 {
            return None;
        }
        let mut documents: Vec<Arc<AssignmentDocument>> = Vec::new();
        let mut peers = Vec::with_capacity(peers_of.len());
        for member in &peers_of {
            if member.key.to_string() == own {
                continue;
            }
            let document = freshest(stores, member);
            // A peer that has published nothing holds nothing yet, but it
            // is dealt its share from the start (groups created together
            // must not each be planned alone first): with its static count,
            // or what its own reconcile reported to the book (0 until then).
            let readable = document
                .as_deref()
                .map_or_else(|| member.static_count.map_or(0, u64::from), readable_in);
            let peer_loads = if member.balance.weighs_load() {
                shardring_core::pool::measured_loads_of(&loads.peek(&member.key))
            } else {
                BTreeMap::new()
            };
            documents.extend(document.iter().cloned());
            peers.push(Peer {
                group: member.key.to_string(),
                pool: member.pool.clone(),
                balance: member.balance,
                standbys: member.standbys,
                readable,
                document,
                loads: peer_loads,
            });
        }
        let own_peer = Peer::of(obs);
        documents.extend(own_peer.document.iter().cloned());
        peers.push(own_peer);
        // Pods away that a pool waits for are dealt to as if they were
        // here, from what every group of the balance holds for them.
        let all_documents: Vec<&AssignmentDocument> = documents.iter().map(Arc::as_ref).collect();
        let returning: Vec<_> = balance
            .iter()
            .map(|(pool, pods)| {
                identities(
                    pool,
                    pods,
                    &obs.stateful_sets,
                    &obs.departed,
                    &all_documents,
                    obs.now,
                )
                .returning
            })
            .collect();
        let pools: Vec<PoolPods<'_>> = balance
            .iter()
            .zip(&returning)
            .map(|((pool, pods), returning)| PoolPods {
                pool,
                pods,
                returning,
            })
            .collect();
        let key = (namespace, names.join("+"));
        let (shared, seq) = {
            let mut books = self.books.lock();
            let seq = self.shares_taken.fetch_add(1, Ordering::Relaxed) + 1;
            let book = books.entry(key.clone()).or_default();
            let shared = book.share(&own, &pools, peers, obs.now);
            // Under the books' lock: a group first in line takes its share
            // (and gives it back) only after it is marked so.
            let mut precedence = self.precedence.lock();
            precedence.first_in_line(&key, &shared.changed, seq, Instant::now());
            precedence.started(&key, &own, seq);
            (shared, seq)
        };
        self.wake(&shared.changed);
        obs.pool_share = shared.share;
        Some(PoolTicket {
            book: key,
            group: own,
            seq,
        })
    }

    /// Whether `group` defers the reconcile it is starting, and for how
    /// long at most: other groups of its pool that a new deal concerns go
    /// first ([`Precedence`]). A group being deleted never waits.
    pub(crate) fn defer(&self, group: &ShardGroup) -> Option<std::time::Duration> {
        if group.metadata.deletion_timestamp.is_some() {
            return None;
        }
        self.precedence.lock().defer(
            &GroupKey::of(group),
            &group.spec.pool_ref.name,
            Instant::now(),
        )
    }

    /// The reconcile that took `ticket` is over and `moved` shards (or
    /// not): gives its turn back and wakes whom that concerns.
    pub(crate) fn done(&self, ticket: &PoolTicket, moved: bool) {
        let wake = match self.books.lock().get_mut(&ticket.book) {
            Some(book) => book.done(&ticket.group, moved),
            None => Vec::new(),
        };
        self.wake(&wake);
        let deferred = self
            .precedence
            .lock()
            .done(&ticket.book, &ticket.group, ticket.seq);
        self.documents_out.notify_waiters();
        for group in &deferred {
            self.requests.request(group);
        }
    }

    /// The reconcile that took `ticket` wrote its document, or has none
    /// to write: the bookkeeping of the others first in line may go.
    pub(crate) fn document_out(&self, ticket: &PoolTicket) {
        self.precedence
            .lock()
            .document_out(&ticket.book, &ticket.group, ticket.seq);
        self.documents_out.notify_waiters();
    }

    /// Returns once the reconcile that took `ticket` may write its status
    /// and Events: no other group first in line in its balance is writing
    /// its document ([`Precedence::documents_pending`]), or the window
    /// closed.
    pub(crate) async fn documents_first(&self, ticket: &PoolTicket) {
        loop {
            let notified = self.documents_out.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check: a document out between the
            // check and the wait still wakes it.
            notified.as_mut().enable();
            let pending = self.precedence.lock().documents_pending(
                &ticket.book,
                &ticket.group,
                Instant::now(),
            );
            let Some(until) = pending else {
                return;
            };
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until.into()) => {}
            }
        }
    }

    /// Asks each of `groups` (`namespace/name`) to reconcile.
    fn wake(&self, groups: &[String]) {
        for name in groups {
            if let Some((ns, name)) = name.split_once('/') {
                self.requests.request(&GroupKey::new(ns, name));
            }
        }
    }

    /// The pools whose pods are balanced with `pool`'s, each with the pods
    /// it selects (`pods`, the observation's, for `pool` itself): `pool`
    /// alone unless another pool of the namespace that a group references
    /// selects one of the same pods ([`domains`]).
    fn balance(
        &self,
        stores: &Stores,
        namespace: &str,
        pool: &ConsumerPool,
        pods: &[PodInfo],
    ) -> Vec<(ConsumerPool, Vec<PodInfo>)> {
        let own_name = pool.name_any();
        let own_selected: Vec<PodInfo> = pods.iter().filter(|p| p.selected).cloned().collect();
        let mut referenced: Vec<String> = self
            .groups
            .state()
            .iter()
            .filter_map(|guard| guard.0.as_ref().ok())
            .filter(|g| g.namespace().as_deref() == Some(namespace))
            .map(|g| g.spec.pool_ref.name.clone())
            .collect();
        referenced.sort();
        referenced.dedup();
        if referenced.iter().all(|name| *name == own_name) {
            return vec![(pool.clone(), own_selected)];
        }
        let mut selected: BTreeMap<String, (ConsumerPool, Vec<PodInfo>)> = BTreeMap::new();
        for name in referenced {
            if name == own_name {
                continue;
            }
            if let Some(other) = stores.pool(namespace, &name) {
                let pods = stores.pool_pods(namespace, &other);
                selected.insert(name, (other, pods));
            }
        }
        selected.insert(own_name.clone(), (pool.clone(), own_selected));
        let selections = selected
            .iter()
            .map(|(name, (_, pods))| {
                let names = pods.iter().map(|p| p.name.clone()).collect();
                (name.clone(), names)
            })
            .collect();
        let domain = domain_of(&domains(&selections), &own_name);
        domain
            .into_iter()
            .filter_map(|name| selected.remove(&name))
            .collect()
    }

    /// A deleted group leaves its pool's deal: the pool's other groups are
    /// asked to reconcile, so its share is dealt to them again (and its
    /// turn, if it held one, is free).
    pub(crate) fn forget(&self, group: &ShardGroup) {
        let namespace = group.namespace().unwrap_or_default();
        let gone = GroupKey::of(group);
        let mut wake = Vec::new();
        for ((ns, _), book) in self.books.lock().iter_mut() {
            if *ns == namespace {
                wake.extend(book.forget(&gone.to_string()));
            }
        }
        self.wake(&wake);
        let deferred = self.precedence.lock().forget(&gone);
        self.documents_out.notify_waiters();
        for deferred in deferred {
            self.requests.request(&deferred);
        }
        for peer in self.referencing(&namespace, &group.spec.pool_ref.name) {
            if peer.key != gone {
                self.requests.request(&peer.key);
            }
        }
    }

    /// Whether `namespace` holds a group other than `own` that is not
    /// being deleted.
    fn has_peers_in(&self, namespace: &str, own: &str) -> bool {
        self.groups.state().iter().any(|guard| {
            guard.0.as_ref().is_ok_and(|g| {
                g.namespace().as_deref() == Some(namespace)
                    && g.metadata.deletion_timestamp.is_none()
                    && GroupKey::of(g).to_string() != own
            })
        })
    }

    /// The groups of the store in `namespace` that reference one of
    /// `pools` and are not being deleted.
    fn referencing_any(&self, namespace: &str, pools: &[String]) -> Vec<Member> {
        let mut members = Vec::new();
        for pool in pools {
            members.extend(self.referencing(namespace, pool));
        }
        members.retain(|m| !m.deleting);
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
                pool: g.spec.pool_ref.name.clone(),
                balance: g.spec.balance,
                standbys: g.spec.standbys,
                deleting: g.metadata.deletion_timestamp.is_some(),
                static_count: g.spec.source.named_partition_count(),
                config_map: g.config_map_name(),
            })
            .collect()
    }

    /// The status of the pool `seen` describes: its pods, its groups, and
    /// each eligible pod's active shards over every group's latest known
    /// document (`own`: the document `group` has just written), and the
    /// load spread over its throughput groups (`spread`: what `group`'s
    /// plan saw, when it balances by throughput over the pool; else the
    /// last one written stays while the pool has throughput groups).
    pub(crate) fn status(
        &self,
        stores: &Stores,
        seen: &PoolSeen,
        group: &GroupKey,
        own: Option<Arc<AssignmentDocument>>,
        spread: Option<String>,
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
        let (written, written_spread) = self
            .status_writes
            .last_written(&(namespace, seen.pool.name_any()))
            .map(|(conditions, spread)| (Some(conditions), spread))
            .unwrap_or_default();
        let load_spread = if seen.pooled_throughput {
            spread
        } else if groups.iter().any(|g| g.balance.weighs_load()) {
            written_spread.or_else(|| seen.pool.status.as_ref()?.load_spread.clone())
        } else {
            None
        };
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
            load_spread,
            balanced_with: seen.balanced_with.clone(),
            conditions: pool_conditions(&counts, generation, seen.now, &previous),
        }
    }

    /// Ends the timers of held pool statuses once the controller has
    /// stopped ([`PoolStatusWrites::stop`]).
    pub(crate) async fn stop_status_writes(&self) {
        self.status_writes.stop().await;
    }

    /// Computes the status of the pool `seen` describes (`status`, in the
    /// pool's turn) and writes it unless it is the one last written
    /// ([`PoolStatusWrites::publish`]: a status whose counts alone changed
    /// waits for the pool's timer). Best effort.
    pub(crate) async fn publish_status(
        &self,
        client: &Client,
        leader: &LeaderGate,
        seen: &PoolSeen,
        status: impl FnOnce() -> ConsumerPoolStatus,
    ) {
        let pool = (
            seen.pool.namespace().unwrap_or_default(),
            seen.pool.name_any(),
        );
        self.status_writes
            .publish(client, leader, &pool, status)
            .await;
    }
}
