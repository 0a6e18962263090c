//! Apply: the API requests of the writing step of a reconcile. The order of
//! the writes (the ConfigMap document first, then the pod annotations, then
//! the status, then Events) and the stop at the first failed one are the
//! core's cycle's ([`shardring_core::cycle()`]); `super::cluster` calls these
//! requests for it.
//!
//! * The document's ConfigMap is written by [`document`]: conditioned on the
//!   ConfigMap the reconcile observed, so a late write never replaces a
//!   newer document. A 409 ends the reconcile with
//!   [`ApplyError::ConfigMapConflict`] before any annotation, status or
//!   Event is written (the annotations must never run ahead of the
//!   document); the retry reads the ConfigMap again.
//! * Pod annotations use a JSON merge patch of `metadata.annotations` only
//!   (`{key: view}` to set, `{key: null}` to remove), with field manager
//!   [`MANAGER`], and the pod's uid in the body as a precondition. Why not
//!   server-side apply here: an apply to a pod that vanished since the
//!   observation would try to *create* it (a 422 that cannot be told from a
//!   real error), while a merge patch gets a clean 404; a null removes the key
//!   whoever set it, with no ownership bookkeeping; and several ShardGroups
//!   can annotate one pod without one group's apply releasing another's key.
//!   A 404 or a uid conflict (a same-named replacement pod) means the pod is
//!   gone: the write is skipped and the next reconcile sees the new pod.
//!   Annotation writes go out concurrently, bounded by a [`WriteLimit`]
//!   shared by all reconciles.
//! * Status is written with server-side apply on the status subresource, only
//!   when it changed.

use futures::TryStreamExt as _;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use shardring_core::{AnnotationWrite, EventKind, EventNote};

use super::cached_pod::CachedPod;
use super::metrics::ControllerMetrics;
use crate::crds::{ShardGroup, ShardGroupStatus};

mod document;
mod error;
mod names;
mod pod_writes;
pub(crate) use document::publish_document;
pub use document::{document_config_map, update_body};
pub use error::ApplyError;
pub use names::MANAGER;
pub(crate) use names::{GROUP_LABEL, MANAGED_BY, MANAGED_BY_LABEL};
pub use pod_writes::{DEFAULT_WRITE_CONCURRENCY, PodWakes, PodWrites, WriteLimit};

/// Server-side applies `status` on the ShardGroup's status subresource.
pub async fn patch_status(
    client: &Client,
    group: &ShardGroup,
    status: &ShardGroupStatus,
) -> Result<(), ApplyError> {
    let api: Api<ShardGroup> =
        Api::namespaced(client.clone(), &group.namespace().unwrap_or_default());
    let body = json!({
        "apiVersion": ShardGroup::api_version(&()),
        "kind": ShardGroup::kind(&()),
        "status": status,
    });
    api.patch_status(
        &group.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(ApplyError::Status)?;
    Ok(())
}

/// Publishes one Event on the ShardGroup (best effort).
pub(crate) async fn publish_event(recorder: &Recorder, group: &ShardGroup, note: &EventNote) {
    let event = Event {
        type_: match note.kind {
            EventKind::Normal => EventType::Normal,
            EventKind::Warning => EventType::Warning,
        },
        reason: note.reason.to_owned(),
        note: Some(note.message.clone()),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, &group.object_ref(&())).await {
        tracing::warn!(%error, reason = note.reason, "could not publish an Event");
    }
}

/// Removes `group`'s annotation from every pod in `pods` (name, uid) — the
/// finalizer's cleanup.
pub(crate) async fn remove_annotations(
    client: &Client,
    group: &ShardGroup,
    pods: &[(String, Option<String>)],
    writes: &WriteLimit,
    metrics: &ControllerMetrics,
) -> Result<(), ApplyError> {
    let namespace = group.namespace().unwrap_or_default();
    let api: Api<CachedPod> = Api::namespaced(client.clone(), &namespace);
    let removals: Vec<AnnotationWrite> = pods
        .iter()
        .map(|(pod, uid)| AnnotationWrite {
            pod: pod.clone(),
            uid: uid.clone(),
            view: None,
        })
        .collect();
    let key = group.annotation_key();
    write_annotations(&api, &namespace, &key, &removals, writes, metrics).await
}

/// Writes `writes` (annotation `key` of pods of `namespace`) to their
/// pods, at most `limit`'s bound at once, each joined with the keys other
/// reconciles write to the same pod meanwhile ([`PodWrites`]), and returns
/// the first failure (the others in flight are dropped: every view carries
/// its epoch, so a late one is harmless, and the retry rewrites what is
/// still wrong). Their order does not matter: within one reconcile no
/// pod's view depends on another's having been written.
pub(crate) async fn write_annotations(
    pods: &Api<CachedPod>,
    namespace: &str,
    key: &str,
    writes: &[AnnotationWrite],
    limit: &WriteLimit,
    metrics: &ControllerMetrics,
) -> Result<(), ApplyError> {
    futures::stream::iter(writes.iter().map(Ok))
        .try_for_each_concurrent(limit.concurrency, |write| async move {
            let value = write.view.as_ref().map(|view| view.to_annotation());
            let target = pod_writes::Target {
                pods,
                namespace,
                name: &write.pod,
                uid: write.uid.as_deref(),
            };
            limit.pods.write(target, key, value, limit, metrics).await
        })
        .await
}
