//! The controller's per-ShardGroup state, in one registry keyed by
//! [`GroupKey`]: what one group's reconciles keep between them (its source
//! and last good topology, the published document decoded at its ConfigMap's
//! version, its failed reconciles in a row, its plan memory) lives in one
//! [`GroupState`] of one [`GroupTable`]; the per-group maps that other parts own and share
//! across their own tasks (the endpoint's views, releases and measured
//! loads, the metrics' per-group series, what the sources' providers share
//! between groups with the same source) are keyed by the same [`GroupKey`] and
//! dropped through the same two calls: [`GroupRegistry::forget`] when a
//! group is deleted, [`GroupRegistry::clear`] when this replica stops
//! leading.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use shardring_core::PlanMemory;
use shardring_core::group_state::DocumentMemory;
use shardring_core::retry::{Failures, Retry};

use super::group_source::GroupSource;
use super::metrics::{ControllerMetrics, GroupLabels};
use crate::GroupKey;
use crate::crds::ShardGroup;
use crate::endpoint::{EndpointState, Loads};
use crate::source::Providers;

/// What the controller keeps about one group between its reconciles.
#[derive(Default)]
pub(crate) struct GroupState {
    /// The group's source and last good topology ([`super::sources`]);
    /// `None` until the first read.
    pub(crate) source: Option<GroupSource>,
    /// The published document as decoded (or written) at its ConfigMap's
    /// resourceVersion ([`super::observe::documents`]).
    pub(crate) document: DocumentMemory,
    /// Failed reconciles in a row, for the retry backoff.
    pub(crate) failures: Failures,
    /// What the group's plans keep between them (the engine's last ring,
    /// the gzip chunks of the last document encoded), lent to one
    /// reconcile at a time ([`super::cluster::Reconcile`]).
    pub(crate) plan_memory: PlanMemory,
    /// Since when a status write of bookkeeping only has been held back
    /// ([`GroupTable::hold_status`]).
    pub(crate) status_held_since: Option<Instant>,
}

/// How long a status write of bookkeeping only may wait for the writes
/// that matter (the documents a pod event changed in a pool's groups)
/// ([`GroupTable::hold_status`]); a pool's status whose counts alone
/// changed waits as long ([`super::pool_status`]).
pub(crate) const STATUS_HOLD: Duration = Duration::from_secs(1);

/// Every group's [`GroupState`]. Cheap to clone: clones share one table
/// (the sources, the document cache and the registry each hold one).
#[derive(Clone, Default)]
pub struct GroupTable {
    groups: Arc<Mutex<HashMap<GroupKey, GroupState>>>,
}

impl GroupTable {
    /// The table, locked (briefly: no I/O while holding it).
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<GroupKey, GroupState>> {
        self.groups.lock()
    }

    /// Lends `group`'s plan memory to one reconcile (an empty one when the
    /// group has no state yet).
    pub(crate) fn lend_plan_memory(&self, group: &GroupKey) -> PlanMemory {
        self.lock()
            .get_mut(group)
            .map(|state| std::mem::take(&mut state.plan_memory))
            .unwrap_or_default()
    }

    /// Whether `group`'s status write of bookkeeping only waits, at
    /// `now`: it waits at most `window` from the first write held back
    /// (`Some`: how much longer), so a burst of pod events costs one status
    /// write per group, after the documents they changed. A group without
    /// state yet writes at once (`None`).
    pub(crate) fn hold_status(
        &self,
        group: &GroupKey,
        now: Instant,
        window: Duration,
    ) -> Option<Duration> {
        let mut table = self.lock();
        let state = table.get_mut(group)?;
        let since = *state.status_held_since.get_or_insert(now);
        window
            .checked_sub(now.duration_since(since))
            .filter(|left| !left.is_zero())
    }

    /// `group`'s status was written: nothing is held back any more.
    pub(crate) fn status_written(&self, group: &GroupKey) {
        if let Some(state) = self.lock().get_mut(group) {
            state.status_held_since = None;
        }
    }

    /// Takes back what [`Self::lend_plan_memory`] lent (dropped when the
    /// group was forgotten meanwhile).
    pub(crate) fn return_plan_memory(&self, group: &GroupKey, memory: PlanMemory) {
        if let Some(state) = self.lock().get_mut(group) {
            state.plan_memory = memory;
        }
    }
}

/// The per-group registry: the [`GroupTable`], and the per-group maps other
/// parts own, reached only to forget or clear them.
pub struct GroupRegistry {
    table: GroupTable,
    /// The endpoint's views, releases and loads (the endpoint server's,
    /// shared with its connection tasks).
    endpoint: Option<EndpointState>,
    /// The measured loads (the endpoint's, when there is one).
    loads: Arc<Loads>,
    /// The per-group metric series.
    metrics: ControllerMetrics,
    /// The sources' providers, which keep what groups share (one reader
    /// per Kinesis stream and lease table).
    providers: Option<Arc<Providers>>,
}

impl GroupRegistry {
    /// A registry over `table` whose groups' series live in `metrics`, and
    /// which also forgets what `providers` keep for a group, the views and
    /// releases of `endpoint`, and the measured loads in `loads` (the
    /// endpoint's, when there is one).
    pub(crate) fn new(
        table: GroupTable,
        metrics: ControllerMetrics,
        providers: Option<Arc<Providers>>,
        endpoint: Option<EndpointState>,
        loads: Arc<Loads>,
    ) -> Self {
        Self {
            table,
            endpoint,
            loads,
            metrics,
            providers,
        }
    }

    /// The table of the groups' own state.
    pub(crate) fn table(&self) -> &GroupTable {
        &self.table
    }

    /// A reconcile of `key` failed (`stale_read`: only because a cache
    /// lagged behind): when to retry, and whether to report it.
    pub(crate) fn failed(&self, key: &GroupKey, stale_read: bool) -> Retry {
        let mut groups = self.table.lock();
        let state = groups.entry(key.clone()).or_default();
        state.failures.failed(stale_read)
    }

    /// A reconcile of `key` succeeded: its failure streak ends.
    pub(crate) fn succeeded(&self, key: &GroupKey) {
        if let Some(state) = self.table.lock().get_mut(key) {
            state.failures.succeeded();
        }
    }

    /// Forgets everything kept about the deleted `group`: its state, its
    /// views, releases and loads, its metric series, and what its source's
    /// provider keeps for it when no other group has the same source.
    pub(crate) fn forget(&self, group: &ShardGroup) {
        let key = GroupKey::of(group);
        {
            let mut groups = self.table.lock();
            if let Some(GroupSource { spec, .. }) = groups.remove(&key).and_then(|s| s.source)
                && let Some(providers) = &self.providers
                && !groups.values().any(|other| {
                    other
                        .source
                        .as_ref()
                        .is_some_and(|source| source.spec == spec)
                })
            {
                providers.forget(&group.spec);
            }
        }
        if let Some(endpoint) = &self.endpoint {
            endpoint.directory.remove_group(&key);
            endpoint.releases.remove_group(&key);
        }
        self.loads.remove_group(&key);
        self.metrics.forget(&GroupLabels {
            namespace: key.namespace,
            shardgroup: key.name,
        });
    }

    /// Forgets what only a leader serves: the endpoint's views, releases and
    /// loads (a later leadership starts from what its first cycles
    /// publish). The groups' own state stays: it
    /// describes the cluster, whichever replica leads.
    pub(crate) fn clear(&self) {
        if let Some(endpoint) = &self.endpoint {
            endpoint.directory.clear();
            endpoint.releases.clear();
            endpoint.loads.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crds::{AssignmentDocument, fixtures};

    fn group(name: &str) -> ShardGroup {
        fixtures::static_group("ns", name, "pool", 2, "s-{index}")
    }

    /// A registry whose every per-group map holds something of `names`.
    fn filled(names: &[&str]) -> (GroupRegistry, GroupTable, EndpointState) {
        let table = GroupTable::default();
        let endpoint = EndpointState::default();
        let registry = GroupRegistry::new(
            table.clone(),
            ControllerMetrics::default(),
            None,
            Some(endpoint.clone()),
            Arc::clone(&endpoint.loads),
        );
        for name in names {
            let key = GroupKey::new("ns", *name);
            let document = Arc::new(AssignmentDocument::new(key.to_string(), 3));
            // As the document cache remembers the operator's own write.
            table.lock().entry(key.clone()).or_default().document.apply(
                &format!("{name}-assignment"),
                "7".into(),
                document,
            );
            registry.failed(&key, false);
            endpoint.directory.want(&key);
        }
        (registry, table, endpoint)
    }

    #[test]
    fn forgetting_a_group_drops_all_its_state_and_only_its() {
        let (registry, table, endpoint) = filled(&["gone", "kept"]);
        registry.forget(&group("gone"));
        let (gone, kept) = (GroupKey::new("ns", "gone"), GroupKey::new("ns", "kept"));
        let table = table.lock();
        assert!(!table.contains_key(&gone));
        assert!(table[&kept].document.latest().is_some());
        assert_ne!(table[&kept].failures, Failures::default());
        assert!(!endpoint.directory.is_wanted(&gone));
        assert!(endpoint.directory.is_wanted(&kept));
    }

    #[test]
    fn losing_the_leadership_clears_what_a_leader_serves_and_keeps_the_groups() {
        let (registry, table, endpoint) = filled(&["g"]);
        registry.clear();
        let key = GroupKey::new("ns", "g");
        assert!(!endpoint.directory.is_wanted(&key));
        assert!(table.lock()[&key].document.latest().is_some());
    }

    #[test]
    fn a_success_ends_the_streak_and_a_forgotten_group_stays_forgotten() {
        let (registry, table, _) = filled(&["g"]);
        let key = GroupKey::new("ns", "g");
        registry.succeeded(&key);
        assert_eq!(table.lock()[&key].failures, Failures::default());
        registry.forget(&group("g"));
        registry.succeeded(&key);
        assert!(table.lock().is_empty());
    }
}
