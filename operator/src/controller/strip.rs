//! What the pod cache keeps. Pods are the largest objects the operator
//! watches, so every pod is cut down before it enters the reflector store to
//! what the observe step reads: name, namespace, uid, labels, deletion
//! timestamp and grace period, node name, the Ready condition, and only the
//! annotations shardring writes. Everything else (managedFields, the spec's
//! containers, most of the status) is dropped.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};

use crate::crds::assignment::ANNOTATION_PREFIX;

/// Strips `pod` in place, keeping annotations under the shardring prefix and
/// those named in `extra_keys` (custom `spec.output.annotationKey`s).
pub fn strip_pod(pod: &mut Pod, extra_keys: &BTreeSet<String>) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k.starts_with(ANNOTATION_PREFIX) || extra_keys.contains(k));
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    pod.spec = Some(PodSpec {
        node_name,
        ..Default::default()
    });
    let ready: Option<PodCondition> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| PodCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            last_transition_time: c.last_transition_time.clone(),
            ..Default::default()
        });
    pod.status = Some(PodStatus {
        conditions: ready.map(|c| vec![c]),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::api::ObjectMeta;

    #[test]
    fn keeps_only_what_observe_reads() {
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                annotations: Some(
                    [
                        ("assignment.shardring.io/g".to_owned(), "{}".to_owned()),
                        ("example.com/shards".to_owned(), "x".to_owned()),
                        (
                            "kubectl.kubernetes.io/last-applied-configuration".to_owned(),
                            "big".to_owned(),
                        ),
                    ]
                    .into(),
                ),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                hostname: Some("h".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(vec![
                    PodCondition {
                        type_: "PodScheduled".into(),
                        status: "True".into(),
                        ..Default::default()
                    },
                    PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        message: Some("m".into()),
                        ..Default::default()
                    },
                ]),
                pod_ip: Some("10.0.0.1".into()),
                ..Default::default()
            }),
        };
        strip_pod(&mut pod, &BTreeSet::from(["example.com/shards".to_owned()]));
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["assignment.shardring.io/g", "example.com/shards"]
        );
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(
            pod.spec.as_ref().unwrap(),
            &PodSpec {
                node_name: Some("n1".into()),
                ..Default::default()
            }
        );
        let status = pod.status.unwrap();
        assert!(status.pod_ip.is_none());
        let conditions = status.conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            (
                conditions[0].type_.as_str(),
                conditions[0].message.as_deref()
            ),
            ("Ready", None)
        );
    }
}
