//! What each request of a reconcile must look like: the ConfigMap create
//! or conditioned update (labels, owner reference, the document), a pod's
//! annotation merge patch (only the annotation and the uid precondition),
//! the status apply and an Event; with the paths they go to.

use serde_json::{Value, json};
use shardring::crds::{AssignmentDocument, PodView};

use crate::controller_support::mock_api::Seen;
use shardring_core::fixtures::*;

pub(super) fn writes(seen: &[Seen]) -> Vec<&Seen> {
    seen.iter().filter(|s| s.method != "GET").collect()
}

fn published(seen: &Seen) -> AssignmentDocument {
    serde_json::from_str(seen.body["data"]["assignment.json"].as_str().unwrap()).unwrap()
}

pub(super) const CM_PATH: &str = "/api/v1/namespaces/prod/configmaps/orders-assignment";

const CMS_PATH: &str = "/api/v1/namespaces/prod/configmaps";

pub(super) const STATUS_PATH: &str =
    "/apis/shardring.io/v1alpha1/namespaces/prod/shardgroups/orders/status";

pub(super) const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/prod/events";

/// An update of the document conditioned on the observed `version`.
pub(super) fn assert_configmap_update(s: &Seen, version: &str) -> AssignmentDocument {
    assert_eq!((s.method.as_str(), s.path.as_str()), ("PUT", CM_PATH));
    assert_eq!(s.query, "fieldManager=shardring");
    assert_eq!(s.content_type, "application/json");
    assert_eq!(
        s.body["metadata"]["resourceVersion"], version,
        "the update carries the observed resourceVersion as its precondition"
    );
    assert_configmap_body(s)
}

/// A create of the document (no ConfigMap was observed).
pub(super) fn assert_configmap_create(s: &Seen) -> AssignmentDocument {
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", CMS_PATH));
    assert_eq!(s.query, "fieldManager=shardring");
    assert_eq!(s.content_type, "application/json");
    assert_eq!(s.body["metadata"]["name"], "orders-assignment");
    assert!(s.body["metadata"].get("resourceVersion").is_none());
    assert_configmap_body(s)
}

fn assert_configmap_body(s: &Seen) -> AssignmentDocument {
    assert_eq!(s.body["apiVersion"], "v1");
    assert_eq!(s.body["kind"], "ConfigMap");
    assert_eq!(
        s.body["metadata"]["labels"],
        json!({"app.kubernetes.io/managed-by": "shardring", "shardring.io/shard-group": "orders"})
    );
    assert_eq!(
        s.body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup", "name": "orders", "uid": GROUP_UID, "controller": true, "blockOwnerDeletion": true}])
    );
    published(s)
}

pub(super) fn assert_annotation_patch(s: &Seen, pod: &str) -> Option<PodView> {
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        (
            "PATCH",
            format!("/api/v1/namespaces/prod/pods/{pod}").as_str()
        )
    );
    assert_eq!(s.query, "fieldManager=shardring");
    assert_eq!(s.content_type, "application/merge-patch+json");
    let metadata = s.body["metadata"].as_object().unwrap();
    assert_eq!(
        metadata.keys().collect::<Vec<_>>(),
        ["annotations", "uid"],
        "only the annotation and the uid precondition"
    );
    assert_eq!(metadata["uid"], format!("uid-{pod}"));
    let annotations = metadata["annotations"].as_object().unwrap();
    assert_eq!(annotations.len(), 1);
    annotations[KEY]
        .as_str()
        .map(|v| serde_json::from_str(v).unwrap())
}

pub(super) fn assert_status_apply(s: &Seen) -> Value {
    assert_eq!((s.method.as_str(), s.path.as_str()), ("PATCH", STATUS_PATH));
    assert_eq!(s.query, "fieldManager=shardring&force=true");
    assert_eq!(s.content_type, "application/apply-patch+yaml");
    assert_eq!(s.body["apiVersion"], "shardring.io/v1alpha1");
    assert_eq!(s.body["kind"], "ShardGroup");
    s.body["status"].clone()
}

/// The condition of type `type_` in an applied `status`.
pub(super) fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

pub(super) fn assert_event(s: &Seen, reason: &str) {
    assert_eq!((s.method.as_str(), s.path.as_str()), ("POST", EVENTS_PATH));
    assert_eq!(s.body["reason"], reason);
    assert_eq!(s.body["regarding"]["name"], "orders");
}
