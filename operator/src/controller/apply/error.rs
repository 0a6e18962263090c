//! Why a write of the apply step failed ([`ApplyError`], with messages that
//! say what to fix), and how a refused pod patch is read.

use std::sync::Arc;

use shardring_core::codec;
use shardring_core::observation::PublishedVersion;

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
pub(super) fn replaced(status: &kube::core::Status) -> bool {
    status.code == 409
        || (status.code == 422
            && status
                .details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
