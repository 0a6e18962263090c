//! The functions kube's `Controller` calls for a ShardGroup: the reconcile
//! (the source read, then the controller core's cycle over this cluster,
//! behind the cleanup finalizer), the finalizer's cleanup of pod
//! annotations, and the error policy; and the reconcile's [`Error`].

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, Event as FinalizerEvent};
use kube::runtime::reflector::ObjectRef;
use tracing::instrument;

use shardring_core::EventNote;

use super::apply::{self, ApplyError};
use super::cluster;
use super::context::Context;

use crate::GroupKey;
use crate::crds::assignment::encoding::payload_bytes;
use crate::crds::{FINALIZER, ShardGroup};

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// Adding or removing the finalizer failed (or the object had no name).
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
}

impl Error {
    /// The reconcile's own error, unwrapped from the finalizer's.
    fn inner(&self) -> &Error {
        match self {
            Error::Finalizer(error) => match error.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => {
                    inner.inner()
                }
                _ => self,
            },
            Error::Apply(_) => self,
        }
    }

    /// Whether the ConfigMap's precondition failed (409): usually the cache
    /// had not seen our own previous write yet.
    pub(crate) fn is_config_map_conflict(&self) -> bool {
        matches!(
            self.inner(),
            Error::Apply(ApplyError::ConfigMapConflict { .. })
        )
    }

    /// Whether a write failed only because the cache it was planned from
    /// lagged behind our own previous write: a ConfigMap precondition (409),
    /// or adding the finalizer when the cached ShardGroup did not show it yet
    /// (the JSON patch's `test` of the finalizer list fails with 422, or the
    /// resourceVersion with 409). The next read fixes both.
    pub(crate) fn is_stale_read(&self) -> bool {
        if self.is_config_map_conflict() {
            return true;
        }
        match self {
            Error::Finalizer(error) => matches!(
                error.as_ref(),
                finalizer::Error::AddFinalizer(kube::Error::Api(status))
                    if status.code == 422 || status.code == 409
            ),
            Error::Apply(_) => false,
        }
    }

    /// Constant label for the errors-by-reason metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Apply(error) => error.metric_label(),
            Error::Finalizer(error) => match error.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => {
                    inner.metric_label()
                }
                finalizer::Error::AddFinalizer(_) | finalizer::Error::RemoveFinalizer(_) => {
                    "FinalizerWrite"
                }
                finalizer::Error::UnnamedObject => "UnnamedObject",
                finalizer::Error::InvalidFinalizer => "InvalidFinalizer",
            },
        }
    }
}

/// Reconciles one ShardGroup: observe → plan → apply, behind the cleanup
/// finalizer. A malformed object waits for a change (it is reported, never
/// retried in a loop).
#[instrument(skip_all, fields(namespace = obj.namespace().unwrap_or_default(), shardgroup = obj.name_any()))]
pub async fn reconcile(
    obj: Arc<DeserializeGuard<ShardGroup>>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    ctx.metrics.reconciles.inc();
    let group = match &obj.0 {
        Ok(group) => group,
        Err(invalid) => {
            tracing::warn!(error = %invalid.error, "ShardGroup cannot be read; waiting for it to be fixed");
            ctx.metrics.error("InvalidObject");
            return Ok(Action::await_change());
        }
    };
    if !ctx.caches_synced() {
        // A cache still filling would make this decision from part of the
        // cluster ("0 pods"); every group is reconciled once they are full.
        return Ok(Action::await_change());
    }
    if !ctx.may_write() {
        // A standby keeps its caches warm but never writes; becoming leader
        // reconciles every ShardGroup (see `runner`).
        return Ok(Action::await_change());
    }
    if let Some(wait) = ctx.pools.defer(group) {
        // Groups of its pool whose documents a new deal changes go first;
        // this one is woken when they are done (at most `wait` from now).
        tracing::debug!(
            wait_ms = wait.as_millis(),
            "deferred behind the groups a new deal concerns"
        );
        return Ok(Action::requeue(wait));
    }
    let api: Api<ShardGroup> =
        Api::namespaced(ctx.client.clone(), &group.namespace().unwrap_or_default());
    let result = finalizer::finalizer(&api, FINALIZER, Arc::new(group.clone()), |event| async {
        match event {
            FinalizerEvent::Apply(group) => reconcile_group(&group, &ctx).await,
            FinalizerEvent::Cleanup(group) => cleanup_group(&group, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    if result.is_ok() {
        ctx.groups.succeeded(&GroupKey::of(group));
    }
    result
}

/// Observe, plan and apply for a live ShardGroup: the source read, then the
/// core's cycle at the time read once it is done.
pub(crate) async fn reconcile_group(group: &ShardGroup, ctx: &Context) -> Result<Action, Error> {
    // The source read is stamped with the time it started; the observation
    // (and everything after it) with one time read once the read is done:
    // `now` must never precede what was observed, or a lease scan taken
    // during the read would look newer than the revokes this reconcile
    // publishes at `now`, and count as evidence that they were released.
    let started = Instant::now();
    let topology = ctx.sources.read(group, ctx.clock.now()).await;
    let now = ctx.clock.now();
    let read = started.elapsed();
    // Observe → plan → apply: the core's cycle, over this cluster.
    let mut cluster = cluster::Reconcile::new(group, ctx, topology, started);
    let before = cluster.shortcuts();
    let done = shardring_core::cycle(&mut cluster, now).await;
    let timings = cluster.timings();
    let after = cluster.shortcuts();
    let status_held = cluster.status_held();
    let (decision, _) = done.into_result()?;
    let document_bytes = match &decision.document_write {
        Some(write) => Some(write.encoded.encoded_bytes()),
        None => published_bytes(ctx, group),
    };
    ctx.metrics.record(group, &decision, document_bytes, now);
    let requeue = status_held.map_or(decision.requeue_after, |due| {
        decision.requeue_after.min(due)
    });
    tracing::debug!(
        read_ms = read.as_millis(),
        observe_ms = timings.observed.saturating_sub(read).as_millis(),
        plan_ms = timings.planned.saturating_sub(timings.observed).as_millis(),
        apply_ms = started
            .elapsed()
            .saturating_sub(timings.planned)
            .as_millis(),
        document_ms = timings.steps.document.as_millis(),
        annotations_ms = timings.steps.annotations.as_millis(),
        status_ms = timings.steps.status.as_millis(),
        events_ms = timings.steps.events.as_millis(),
        serve_ms = timings.steps.serve.as_millis(),
        requeue_ms = requeue.as_millis(),
        plan_requeue_ms = decision.requeue_after.as_millis(),
        engine_patched = after.engine_patched > before.engine_patched,
        step_skipped = after.step_skipped > before.step_skipped,
        "reconciled"
    );
    Ok(Action::requeue(requeue))
}

/// The size of `group`'s ConfigMap in the cache as the API server counts it
/// against its limit (keys plus values), if it is there.
fn published_bytes(ctx: &Context, group: &ShardGroup) -> Option<usize> {
    let namespace = group.namespace().unwrap_or_default();
    let key = ObjectRef::<ConfigMap>::new(&group.config_map_name()).within(&namespace);
    let map = ctx.stores.config_maps.get(&key)?;
    Some(payload_bytes(map.data.as_ref(), map.binary_data.as_ref()))
}

/// Finalizer cleanup: removes the group's annotation from every pod that has
/// it (the ConfigMap goes with the ShardGroup through its owner reference).
pub(crate) async fn cleanup_group(group: &ShardGroup, ctx: &Context) -> Result<Action, Error> {
    let namespace = group.namespace().unwrap_or_default();
    let key = group.annotation_key();
    let carriers: Vec<(String, Option<String>)> = ctx
        .stores
        .pods
        .read_namespace(&namespace, |pods| {
            shardring_core::group_state::collect_pods(pods, |_| false, None, &key, |_| None)
        })
        .into_iter()
        .map(|p| (p.name, Some(p.uid).filter(|u| !u.is_empty())))
        .collect();
    apply::remove_annotations(&ctx.client, group, &carriers, &ctx.writes, &ctx.metrics).await?;
    ctx.groups.forget(group);
    ctx.pools.forget(group);
    tracing::info!(
        pods = carriers.len(),
        "ShardGroup deleted: pod annotations removed"
    );
    Ok(Action::await_change())
}

/// Error policy: the core's retry rule ([`shardring_core::retry`], which
/// the simulation runs on too): a reconcile that failed is retried with
/// exponential backoff (2 s doubling to 5 min), reset by the next success,
/// and the first reported failure of a streak becomes a Warning Event; the
/// first stale-read conflicts in a row ([`Error::is_stale_read`]: the
/// ConfigMap's precondition, or adding the finalizer) are retried after
/// 500 ms with neither backoff nor Event.
pub fn error_policy(
    obj: Arc<DeserializeGuard<ShardGroup>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.error(error.metric_label());
    let key = GroupKey::new(obj.namespace().unwrap_or_default(), obj.name_any());
    let retry = ctx.groups.failed(&key, error.is_stale_read());
    if !retry.reported {
        tracing::info!(%error, retry_in = ?retry.after, "the object changed since the cache read it; retrying");
        return Action::requeue(retry.after);
    }
    tracing::warn!(%error, retry_in = ?retry.after, "reconcile failed");
    // The first reported failure of a streak becomes a Warning Event on the
    // group (a write too, so not one per retry); best effort, off the error
    // path.
    if retry.first_reported
        && let (Some(recorder), Ok(group)) = (ctx.recorder.clone(), &obj.0)
    {
        let group = group.clone();
        let note = EventNote::warning(
            error.metric_label(),
            format!("reconcile failed, retrying: {error}"),
        );
        tokio::spawn(async move { apply::publish_event(&recorder, &group, &note).await });
    }
    Action::requeue(retry.after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("conflict", "Invalid")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_finalizer_add_refused_by_its_test_is_a_stale_read() {
        for code in [409, 422] {
            let error = Error::Finalizer(Box::new(finalizer::Error::AddFinalizer(api_error(code))));
            assert!(error.is_stale_read(), "{code}");
        }
        let forbidden = Error::Finalizer(Box::new(finalizer::Error::AddFinalizer(api_error(403))));
        assert!(!forbidden.is_stale_read());
        let removal = Error::Finalizer(Box::new(finalizer::Error::RemoveFinalizer(api_error(422))));
        assert!(!removal.is_stale_read());
    }
}
