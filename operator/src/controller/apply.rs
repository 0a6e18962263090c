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

use std::sync::Arc;

use futures::TryStreamExt as _;
use tokio::sync::Semaphore;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use shardring_core::codec;
use shardring_core::observation::PublishedVersion;
use shardring_core::{AnnotationWrite, EventKind, EventNote};

use super::cached_pod::CachedPod;
use super::metrics::ControllerMetrics;
use super::own_writes::OwnWrites;
use crate::crds::{ShardGroup, ShardGroupStatus};

mod document;
mod pod_writes;
pub(crate) use document::publish_document;
pub use document::{document_config_map, update_body};
pub use pod_writes::PodWrites;

/// The field manager of every write the operator makes.
pub const MANAGER: &str = "shardring";
/// Label every object the operator creates carries.
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub(crate) const MANAGED_BY: &str = "shardring";
/// Label naming the ShardGroup an object belongs to.
pub(crate) const GROUP_LABEL: &str = "shardring.io/shard-group";

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The document could not be encoded (the plan step checks size first).
    #[error("encoding the assignment document: {0}")]
    Encode(#[from] codec::EncodeError),
    /// Writing the ConfigMap failed.
    #[error("publishing ConfigMap {name}: {source}")]
    ConfigMap {
        /// ConfigMap name.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// The ConfigMap's precondition failed (409): it changed since this
    /// reconcile read it, or was created since it saw none. Nothing was
    /// written; the retry observes it again.
    #[error("{}", conflict_message(.name, .expected))]
    ConfigMapConflict {
        /// ConfigMap name.
        name: String,
        /// What the write was conditioned on.
        expected: PublishedVersion,
        /// The API error (409 Conflict or AlreadyExists).
        source: kube::Error,
    },
    /// Patching a pod's annotation failed.
    #[error("{}", annotation_message(.pod, .source))]
    Annotation {
        /// Pod name.
        pod: String,
        /// The API error (shared by every reconcile whose key the write
        /// carried: [`PodWrites`]).
        source: Arc<kube::Error>,
    },
    /// Writing the status failed.
    #[error("writing the ShardGroup status: {0}")]
    Status(kube::Error),
    /// The ShardGroup has no namespace or uid (never for a stored object).
    #[error("the ShardGroup has no {0}")]
    Incomplete(&'static str),
}

impl ApplyError {
    /// Constant label for the errors-by-reason metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ApplyError::Encode(_) => "Encode",
            ApplyError::ConfigMap { .. } => "ConfigMapWrite",
            ApplyError::ConfigMapConflict { .. } => "ConfigMapConflict",
            ApplyError::Annotation { .. } => "AnnotationWrite",
            ApplyError::Status(_) => "StatusWrite",
            ApplyError::Incomplete(_) => "IncompleteObject",
        }
    }
}

fn annotation_message(pod: &str, source: &Arc<kube::Error>) -> String {
    let hint = match source.as_ref() {
        kube::Error::Api(status) if status.code == 403 => {
            "; the operator may not patch this pod: grant it (chart value rbac.podAnnotations: true, or the install's ClusterRole) or set spec.output.podAnnotations: false on groups whose consumers read the ConfigMap or the endpoint"
        }
        _ => "",
    };
    format!("patching the annotation of pod {pod}: {source}{hint}")
}

fn conflict_message(name: &str, expected: &PublishedVersion) -> String {
    let what = match expected {
        PublishedVersion::Absent => {
            "was created after this reconcile saw none (409 AlreadyExists)".to_owned()
        }
        PublishedVersion::At(version) => format!(
            "changed after this reconcile read it at resourceVersion {version} (409 Conflict)"
        ),
    };
    format!(
        "ConfigMap {name} {what}: the document was not written and nothing after it was; the retry reads it again"
    )
}

/// Whether a refused pod patch says the pod was replaced by another of its
/// name: the uid in the body is the precondition, which the API server
/// answers with 409, or, for a merge patch, with 422 Invalid naming
/// `metadata.uid` as immutable (Kubernetes 1.35 does the latter; a
/// StatefulSet's recreated pod meets it on every return).
fn replaced(status: &kube::core::Status) -> bool {
    status.code == 409
        || (status.code == 422
            && status
                .details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")))
}

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

/// The bound on pod writes in flight, shared by every reconcile of one
/// controller: thousands of annotations (a first publish, a rolling deploy)
/// go out concurrently but never as an unbounded burst. The API server's
/// priority and fairness answers an excess with 429 and `Retry-After`, which
/// the client honours (kube's default retry policy) before the write counts
/// as failed.
///
/// It also remembers the pod versions those writes produced
/// ([`OwnWrites`]), so the pod watch can tell their echoes from changes,
/// and coalesces the keys several reconciles write to one pod at once
/// ([`PodWrites`]).
#[derive(Debug, Clone)]
pub struct WriteLimit {
    permits: Arc<Semaphore>,
    concurrency: usize,
    /// The versions the writes produced.
    pub own: OwnWrites,
    /// The pod writes in flight and the keys waiting for them.
    pods: PodWrites,
}

impl WriteLimit {
    /// At most `concurrency` writes in flight (at least one).
    pub fn new(concurrency: usize) -> Self {
        let concurrency = concurrency.max(1);
        Self {
            permits: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            own: OwnWrites::default(),
            pods: PodWrites::default(),
        }
    }
}

impl Default for WriteLimit {
    /// [`DEFAULT_WRITE_CONCURRENCY`] writes in flight.
    fn default() -> Self {
        Self::new(DEFAULT_WRITE_CONCURRENCY)
    }
}

/// Pod writes in flight by default: the throughput of a 16-thread client,
/// well inside the API server's default priority-and-fairness share.
pub const DEFAULT_WRITE_CONCURRENCY: usize = 16;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn status(value: serde_json::Value) -> kube::core::Status {
        serde_json::from_value(value).expect("a Status")
    }

    #[test]
    fn a_uid_refused_as_immutable_or_conflicting_is_a_replaced_pod() {
        // As Kubernetes 1.35 answers a merge patch carrying the old uid.
        let immutable = status(json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "Pod \"web-2\" is invalid: metadata.uid: Invalid value: \"u\": field is immutable",
            "details": {"name": "web-2", "kind": "Pod", "causes": [
                {"reason": "FieldValueInvalid", "message": "field is immutable", "field": "metadata.uid"}
            ]}
        }));
        assert!(replaced(&immutable));
        assert!(replaced(&status(json!({"status": "Failure", "code": 409}))));
        let other = status(json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "details": {"causes": [{"field": "metadata.annotations"}]}
        }));
        assert!(!replaced(&other), "another invalid field is a real error");
        assert!(!replaced(&status(
            json!({"status": "Failure", "code": 403})
        )));
    }
}
