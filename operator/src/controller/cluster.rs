//! The Kubernetes cluster as the core's reconcile cycle
//! ([`shardring_core::cycle()`]) sees it, for one ShardGroup: the observe
//! half reads the reflector stores (with the source read the reconcile made
//! before, the lease scan, the releases acknowledged through the endpoint,
//! and the measured loads of a group that uses them), the apply half makes
//! the API requests of [`super::apply`], counting each in the metrics, and
//! serves what they wrote: the endpoint's views and CA
//! ([`super::endpoint_sync`]), the load books, and the decoded document the
//! next reconcile reads. It also times the reconcile's phases (the core
//! reads no clock): observe, plan and apply. When it ends (however it
//! ends) it gives its group's turn in its pool's balance back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use shardring_core::cycle::{Apply, Observe, Observed};
use shardring_core::observation::{PublishedVersion, TopologyObservation};
use shardring_core::plan::{Decision, DocumentWrite};
use shardring_core::{AnnotationWrite, EventNote, PlanMemory};

use super::Context;
use super::apply::{self, ApplyError};
use super::cached_pod::CachedPod;
use super::endpoint_sync::{self, EndpointSeen};
use super::groups::STATUS_HOLD;
use super::observe::Reads;
use crate::GroupKey;
use crate::crds::{ShardGroup, ShardGroupStatus};
use shardring_crds::endpoint::CA_CONFIGMAP_NAME;

/// One reconcile's reach into the cluster.
pub(crate) struct Reconcile<'a> {
    group: &'a ShardGroup,
    ctx: &'a Context,
    /// The source read, until the observe half takes it.
    topology: Option<TopologyObservation>,
    /// When the reconcile started (before its source read).
    started: Instant,
    /// Elapsed since `started` when the observation was built.
    observed: Duration,
    /// Elapsed since `started` when the plan step decided.
    planned: Duration,
    /// What the endpoint needs of the observation, when there is one.
    endpoint_seen: Option<EndpointSeen>,
    /// The group's plan memory, lent by its [`GroupState`] for this
    /// reconcile and given back when it ends (the controller runs one
    /// reconcile per group at a time).
    ///
    /// [`GroupState`]: super::groups::GroupState
    plan_memory: PlanMemory,
    /// What the observation showed of the group's pool (its status is
    /// written after the group's writes).
    pool_seen: Option<super::pools::PoolSeen>,
    /// What the observe step took from the group's balance: given back
    /// when the reconcile ends, with whether its plan moved shards.
    pool_ticket: Option<super::pools::PoolTicket>,
    moved: bool,
    /// The decision writes nothing but a status of bookkeeping only
    /// ([`StatusWrite::only_bookkeeping`]): it may wait.
    ///
    /// [`StatusWrite::only_bookkeeping`]: shardring_core::plan::StatusWrite::only_bookkeeping
    status_may_wait: bool,
    /// A status write held back, and how much longer it may wait.
    status_held: Option<Duration>,
    /// How many releases of the group the endpoint had accepted when the
    /// cycle began observing (`None` without an endpoint).
    releases_accepted: Option<u64>,
    /// How long each write step took, in the cycle's order.
    steps: StepTimes,
    /// Elapsed since `started` when the last step ended.
    lap_from: Duration,
}

impl Drop for Reconcile<'_> {
    /// Gives the plan memory back to the group's state (unless the group
    /// was forgotten meanwhile: then it goes with this reconcile).
    fn drop(&mut self) {
        if let Some(ticket) = self.pool_ticket.take() {
            self.ctx.pools.done(&ticket, self.moved);
        }
        let memory = std::mem::take(&mut self.plan_memory);
        self.ctx
            .groups
            .table()
            .return_plan_memory(&GroupKey::of(self.group), memory);
    }
}

/// How long each phase of a reconcile took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timings {
    /// Until the observation was built (the source read included).
    pub(crate) observed: Duration,
    /// Until the plan step decided.
    pub(crate) planned: Duration,
    /// Each write step's own time.
    pub(crate) steps: StepTimes,
}

/// How long each write step of the apply phase took (zero when it had
/// nothing to write): where a slow apply's time went, in the reconcile's
/// debug log.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StepTimes {
    pub(crate) document: Duration,
    pub(crate) annotations: Duration,
    pub(crate) status: Duration,
    pub(crate) events: Duration,
    pub(crate) serve: Duration,
}

impl<'a> Reconcile<'a> {
    /// The cluster of `group`, with the source read `topology` made since
    /// `started`.
    pub(crate) fn new(
        group: &'a ShardGroup,
        ctx: &'a Context,
        topology: TopologyObservation,
        started: Instant,
    ) -> Self {
        Self {
            group,
            ctx,
            topology: Some(topology),
            started,
            observed: Duration::ZERO,
            planned: Duration::ZERO,
            endpoint_seen: None,
            plan_memory: ctx.groups.table().lend_plan_memory(&GroupKey::of(group)),
            pool_seen: None,
            pool_ticket: None,
            moved: false,
            status_may_wait: false,
            status_held: None,
            releases_accepted: None,
            steps: StepTimes::default(),
            lap_from: Duration::ZERO,
        }
    }

    /// How long until the status write this reconcile held back is due
    /// (`None`: nothing was held back).
    pub(crate) fn status_held(&self) -> Option<Duration> {
        self.status_held
    }

    /// How many plans on the group's memory took each shortcut so far
    /// (compared before and after a cycle: which this reconcile's took).
    pub(crate) fn shortcuts(&self) -> shardring_core::Shortcuts {
        self.plan_memory.shortcuts()
    }

    /// The phases' times so far.
    pub(crate) fn timings(&self) -> Timings {
        Timings {
            observed: self.observed,
            planned: self.planned,
            steps: self.steps,
        }
    }

    /// The time since the last step ended (or the plan step decided): the
    /// cycle runs its steps one after the other, so this is the step that
    /// just ended.
    fn lap(&mut self) -> Duration {
        let now = self.started.elapsed();
        let step = now.saturating_sub(self.lap_from);
        self.lap_from = now;
        step
    }

    /// Whether a release was accepted since this cycle observed the group:
    /// it asked for the next reconcile, which starts as soon as this one
    /// ends and writes the status anew.
    fn release_followed(&self) -> bool {
        match (&self.ctx.endpoint, self.releases_accepted) {
            (Some(endpoint), Some(seen)) => {
                endpoint.releases.accepted(&GroupKey::of(self.group)) > seen
            }
            _ => false,
        }
    }

    /// Waits, in a pool, until the other groups a new deal put first in
    /// line have their documents out: this group's bookkeeping must not
    /// hold theirs up on the API server ([`shardring_core::pool::precedence`]).
    async fn documents_first(&self) {
        if let Some(ticket) = &self.pool_ticket {
            self.ctx.pools.documents_first(ticket).await;
        }
    }

    fn namespace(&self) -> Result<String, ApplyError> {
        self.group
            .namespace()
            .ok_or(ApplyError::Incomplete("namespace"))
    }
}

impl Observe for Reconcile<'_> {
    /// The group's plan memory, lent for this reconcile.
    fn plan_memory(&mut self) -> Option<&mut PlanMemory> {
        Some(&mut self.plan_memory)
    }

    /// The observation from the reflector stores, the source read and the
    /// lease scan, with the published ConfigMap's version.
    async fn observe(&mut self, now: jiff::Timestamp) -> Observed {
        let (group, ctx) = (self.group, self.ctx);
        self.releases_accepted = ctx
            .endpoint
            .as_ref()
            .map(|endpoint| endpoint.releases.accepted(&GroupKey::of(group)));
        let (document, version) = ctx.stores.published(group);
        let leases = ctx.sources.leases(group);
        let reads = Reads {
            topology: self.topology.take().unwrap_or_default(),
            loads: endpoint_sync::observe_loads(
                &ctx.loads,
                group,
                document.document(),
                &leases,
                now,
            ),
            leases,
            releases: ctx
                .endpoint
                .as_ref()
                .map(|endpoint| endpoint_sync::observe_releases(endpoint, group))
                .unwrap_or_default(),
        };
        let mut observation = ctx.stores.observation(group, document, reads, now);
        self.pool_ticket = ctx
            .pools
            .deal_into(&ctx.stores, &ctx.loads, &mut observation);
        self.pool_seen = super::pools::PoolSeen::of(&observation);
        self.endpoint_seen = ctx
            .endpoint
            .as_ref()
            .map(|endpoint| endpoint_sync::seen(endpoint, &observation));
        self.observed = self.started.elapsed();
        Observed {
            observation,
            published: version,
        }
    }
}

impl Apply for Reconcile<'_> {
    type Error = ApplyError;
    /// The resourceVersion at which the API server stores exactly the
    /// document written (`None`: the stored content differs).
    type Receipt = Option<String>;

    async fn planned(&mut self, decision: &Decision) {
        self.moved = decision.moves.required + decision.moves.optional > 0;
        self.status_may_wait = decision.document_write.is_none()
            && decision.annotation_writes.is_empty()
            && decision.events.is_empty()
            && decision.status.only_bookkeeping();
        if decision.document_write.is_none()
            && let Some(ticket) = &self.pool_ticket
        {
            self.ctx.pools.document_out(ticket);
        }
        self.planned = self.started.elapsed();
        self.lap_from = self.planned;
        self.ctx
            .metrics
            .plan_duration
            .observe(self.planned.saturating_sub(self.observed).as_secs_f64());
    }

    async fn document(
        &mut self,
        write: &DocumentWrite,
        base: &PublishedVersion,
    ) -> Result<Option<String>, ApplyError> {
        let namespace = self.namespace()?;
        // What the update carries over from the ConfigMap (others' labels,
        // annotations and keys): the cached object the write is
        // conditioned on.
        let observed = self
            .ctx
            .stores
            .config_maps
            .get(&ObjectRef::new(&self.group.config_map_name()).within(&namespace));
        // The wake-up for another change of the ConfigMap that the watch
        // delivers while the write is on its way (held for the write).
        let requests = self.ctx.pools.requests().clone();
        let key = GroupKey::of(self.group);
        let version = apply::publish_document(
            &self.ctx.client,
            self.group,
            write.encoded.clone(),
            base,
            observed.as_deref(),
            &self.ctx.writes.own,
            move || requests.request(&key),
        )
        .await?;
        self.ctx.metrics.write("configmap");
        if let Some(ticket) = &self.pool_ticket {
            self.ctx.pools.document_out(ticket);
        }
        // The document is published: its revokes may be acknowledged from
        // now on. A consumer that watches the ConfigMap sees them at once
        // and releases; told `FutureEpoch` until this cycle's annotations
        // and status are written too (its last step serves the endpoint),
        // it backed off for tens of milliseconds of every handoff. Only
        // the views wait for the end of the cycle: a view must never run
        // ahead of the pod's annotation.
        if let Some(endpoint) = &self.ctx.endpoint {
            endpoint
                .releases
                .sync_group(&GroupKey::of(self.group), Some(&write.document));
        }
        self.steps.document = self.lap();
        Ok(version)
    }

    async fn annotations(&mut self, writes: &[AnnotationWrite]) -> Result<(), ApplyError> {
        let namespace = self.namespace()?;
        let pods: Api<CachedPod> = Api::namespaced(self.ctx.client.clone(), &namespace);
        let key = self.group.annotation_key();
        apply::write_annotations(
            &pods,
            &namespace,
            &key,
            writes,
            &self.ctx.writes,
            &self.ctx.metrics,
        )
        .await?;
        self.steps.annotations = self.lap();
        Ok(())
    }

    /// Writes the status, unless it may still wait ([`STATUS_HOLD`]: the
    /// reconcile is requeued for when it is due): when it is bookkeeping
    /// only, or when a release accepted during this cycle already asked
    /// for the next reconcile. That one cannot start before this one ends,
    /// and the new owner's grant waits for it: a status it rewrites anyway
    /// is not worth a write on the handoff's path.
    async fn status(&mut self, status: &ShardGroupStatus) -> Result<(), ApplyError> {
        self.namespace()?;
        let key = GroupKey::of(self.group);
        let table = self.ctx.groups.table();
        if self.status_may_wait || self.release_followed() {
            self.status_held = table.hold_status(&key, Instant::now(), STATUS_HOLD);
            if self.status_held.is_some() {
                return Ok(());
            }
        }
        self.documents_first().await;
        apply::patch_status(&self.ctx.client, self.group, status).await?;
        table.status_written(&key);
        self.ctx.metrics.write("status");
        self.steps.status = self.lap();
        Ok(())
    }

    /// Best effort: a failed Event is logged by [`apply::publish_event`].
    async fn events(&mut self, events: &[EventNote]) {
        let Some(recorder) = &self.ctx.recorder else {
            return;
        };
        self.documents_first().await;
        for note in events {
            apply::publish_event(recorder, self.group, note).await;
            self.ctx.metrics.write("event");
        }
        self.steps.events = self.lap();
    }

    /// Load reports are checked against the document now published; the
    /// endpoint serves the views the writes made (and the CA, in the
    /// group's namespace, when it is not there yet); the next reconcile
    /// reads the written document without decoding it, when the API server
    /// stored exactly what was sent.
    async fn serve(&mut self, decision: &Decision, receipt: Option<&Option<String>>) {
        let ctx = self.ctx;
        let key = GroupKey::of(self.group);
        let written = decision
            .document_write
            .as_ref()
            .filter(|_| receipt.is_some());
        if let Some(write) = written {
            ctx.loads.sync(&key, Some(&write.document));
        }
        if let (Some(endpoint), Some(seen)) = (&ctx.endpoint, self.endpoint_seen.take()) {
            let now = ctx.clock.now();
            endpoint_sync::publish(
                endpoint,
                &ctx.metrics,
                &seen,
                decision,
                written.is_some(),
                now,
            );
            let look_again = endpoint_sync::ensure_ca(
                &ctx.client,
                endpoint,
                &key.namespace,
                ctx.pools.groups(),
                &ctx.stores.config_maps,
                &ctx.writes.own,
            )
            .await;
            if let Some(after) = look_again {
                // Held back for an echo that may already have come: this
                // group looks again once it is no longer awaited (its own
                // requeue may be minutes away), unless the echo came
                // meanwhile (then a later edit wakes a group itself).
                let requests = ctx.pools.requests().clone();
                let own = ctx.writes.own.clone();
                let group = key.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    if own.unspent::<ConfigMap>(&group.namespace, CA_CONFIGMAP_NAME) {
                        requests.request(&group);
                    }
                });
            }
        }
        if let (Some(Some(version)), Some(write)) = (receipt, written) {
            ctx.stores.documents.remember(
                &key,
                &self.group.config_map_name(),
                version.clone(),
                Arc::clone(&write.document),
            );
        }
        if let Some(seen) = self.pool_seen.take() {
            let own = written.map(|write| Arc::clone(&write.document));
            let spread = decision
                .status
                .throughput
                .as_ref()
                .and_then(|t| t.spread.clone());
            // Computed in the pool's turn, from the documents its groups
            // wrote so far. Counts alone that must wait are written by the
            // pool's timer, not by a reconcile of this group requeued for
            // them.
            let status = || {
                let status = ctx.pools.status(&ctx.stores, &seen, &key, own, spread);
                if let (Some(fewest), Some(most)) =
                    (status.fewest_shards_per_pod, status.most_shards_per_pod)
                {
                    ctx.metrics
                        .pool_spread(&key.namespace, &seen.name(), fewest, most);
                }
                status
            };
            ctx.pools
                .publish_status(&ctx.client, &ctx.leader, &seen, status)
                .await;
        }
        self.steps.serve = self.lap();
    }
}
