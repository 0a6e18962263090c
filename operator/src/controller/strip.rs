//! What the pod cache keeps. Pods are the largest objects the operator
//! watches: they are decoded as [`CachedPod`], which declares only the
//! fields shardring reads, and each is cut down further before it enters the
//! reflector store to what the observe step reads: name, namespace, uid, labels, creation and
//! deletion timestamps, grace period, `generateName`, node name, the Ready
//! condition, the phase, what the container statuses say
//! ([`crate::controller::observe::containers_of`]) and only the annotations
//! shardring writes. Everything else (managedFields, owner references,
//! finalizers, foreign annotations, conditions other than Ready) is dropped.
//!
//! The container statuses shrink to at most one, carrying only its state's
//! kind, chosen so that [`containers_of`] reads the same from the stripped
//! pod as from the full one: one `terminated` status when every container
//! of a terminating (or terminal) pod is terminated, none when no container
//! ever started, and otherwise one `running` status in phase `Pending` and
//! none in any other phase (which already reads as running). So the common
//! pod, running, keeps no container status at all, and one with sidecars
//! never more than one.
//! The DELETED event of the pod watch carries the stripped object too: the
//! memory of departed pods reads the same fields from it.

use std::collections::BTreeSet;

use super::cached_pod::{
    CachedContainerState, CachedContainerStatus, CachedPod, CachedPodStatus, Present,
};
use shardring_core::observation::Containers;

use super::observe::containers_of;
use crate::crds::assignment::ANNOTATION_PREFIX;

/// Strips `pod` in place, keeping annotations under the shardring prefix and
/// those named in `extra_keys` (custom `spec.output.annotationKey`s).
pub(crate) fn strip_pod(pod: &mut CachedPod, extra_keys: &BTreeSet<String>) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k.starts_with(ANNOTATION_PREFIX) || extra_keys.contains(k));
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
    if pod.spec.as_ref().is_some_and(|s| s.node_name.is_none()) {
        pod.spec = None;
    }
    let containers = containers_of(pod);
    let Some(status) = pod.status.as_mut() else {
        return;
    };
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ == "Ready");
        conditions.shrink_to_fit();
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
    let state = match containers {
        Containers::NeverRan => None,
        Containers::Stopped => Some(CachedContainerState {
            terminated: Some(Present {}),
            ..Default::default()
        }),
        // Outside `Pending`, no status at all already reads as running.
        Containers::Running if status.phase.as_deref() != Some("Pending") => None,
        Containers::Running => Some(CachedContainerState {
            running: Some(Present {}),
            ..Default::default()
        }),
    };
    *status = CachedPodStatus {
        phase: status.phase.take(),
        conditions: status.conditions.take(),
        container_statuses: state.map(|state| {
            vec![CachedContainerStatus {
                state: Some(state),
                last_state: None,
            }]
        }),
        init_container_statuses: None,
        ephemeral_container_statuses: None,
        pod_ip: status.pod_ip.take(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::cached_pod::{CachedCondition, CachedPodSpec};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use kube::api::ObjectMeta;

    fn container(name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            image: "registry.example.com/consumer:1.2.3".into(),
            image_id: "sha256:0123456789abcdef".into(),
            container_id: Some("containerd://0123456789abcdef".into()),
            ready: true,
            restart_count: 3,
            state: Some(state),
            ..Default::default()
        }
    }

    fn terminated() -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                message: Some("a long message".into()),
                container_id: Some("containerd://0123".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running() -> ContainerState {
        ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }
    }

    #[test]
    fn keeps_only_what_observe_reads() {
        let full = Pod {
            metadata: ObjectMeta {
                name: Some("p-7d9f-abcde".into()),
                generate_name: Some("p-7d9f-".into()),
                creation_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
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
                phase: Some("Running".into()),
                pod_ip: Some("10.0.0.1".into()),
                container_statuses: Some(vec![
                    container("consumer", running()),
                    container("sidecar", running()),
                ]),
                init_container_statuses: Some(vec![container("init", terminated())]),
                ..Default::default()
            }),
        };
        let mut pod = CachedPod::from(&full);
        strip_pod(&mut pod, &BTreeSet::from(["example.com/shards".to_owned()]));
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["assignment.shardring.io/g", "example.com/shards"]
        );
        assert!(pod.metadata.managed_fields.is_none());
        // What tells a generated name and a pod's age is kept.
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("p-7d9f-"));
        assert!(pod.metadata.creation_timestamp.is_some());
        assert_eq!(
            pod.spec.as_ref().unwrap(),
            &CachedPodSpec {
                node_name: Some("n1".into()),
            }
        );
        let status = pod.status.clone().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(
            status.conditions.clone().unwrap(),
            vec![CachedCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: None,
            }]
        );
        // A running pod keeps no container status (its phase says enough).
        assert!(status.init_container_statuses.is_none());
        assert!(status.container_statuses.is_none());
        assert_eq!(containers_of(&pod), Containers::Running);
        // A stopped one keeps one, with only the kind of its state: no name,
        // image, ids, counts or messages.
        let mut stopped = CachedPod::from(&Pod {
            metadata: ObjectMeta {
                deletion_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![
                    container("consumer", terminated()),
                    container("sidecar", terminated()),
                ]),
                ..Default::default()
            }),
        });
        strip_pod(&mut stopped, &BTreeSet::new());
        assert_eq!(
            stopped.status.unwrap().container_statuses,
            Some(vec![CachedContainerStatus {
                state: Some(CachedContainerState {
                    terminated: Some(Present {}),
                    running: None,
                }),
                last_state: None,
            }])
        );
    }

    /// Pods in every state the evidence rule distinguishes: the stripped
    /// pod says the same about its containers as the full one.
    #[test]
    fn the_stripped_pod_reads_the_same_containers() {
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ImagePullBackOff".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut crash_looping = container("consumer", waiting.clone());
        crash_looping.last_state = Some(terminated());
        let cases: Vec<(&str, bool, Vec<ContainerStatus>, Containers)> = vec![
            (
                "Running",
                true,
                vec![container("a", terminated()), container("b", terminated())],
                Containers::Stopped,
            ),
            (
                "Running",
                true,
                vec![container("a", terminated()), container("b", running())],
                Containers::Running,
            ),
            (
                "Failed",
                false,
                vec![container("a", terminated())],
                Containers::Stopped,
            ),
            (
                "Running",
                false,
                vec![container("a", terminated())],
                Containers::Running,
            ),
            ("Pending", false, vec![], Containers::NeverRan),
            (
                "Pending",
                true,
                vec![container("a", waiting.clone())],
                Containers::NeverRan,
            ),
            ("Pending", false, vec![crash_looping], Containers::Running),
            ("Running", true, vec![], Containers::Running),
            (
                "Pending",
                false,
                vec![container("a", running()), container("b", waiting)],
                Containers::Running,
            ),
        ];
        for (phase, terminating, statuses, expected) in cases {
            let full = Pod {
                metadata: ObjectMeta {
                    name: Some("p".into()),
                    deletion_timestamp: terminating.then_some(Time(jiff::Timestamp::UNIX_EPOCH)),
                    ..Default::default()
                },
                spec: None,
                status: Some(PodStatus {
                    phase: Some(phase.into()),
                    container_statuses: Some(statuses.clone()),
                    ..Default::default()
                }),
            };
            let mut pod = CachedPod::from(&full);
            assert_eq!(containers_of(&pod), expected, "{phase} {statuses:?}");
            strip_pod(&mut pod, &BTreeSet::new());
            assert_eq!(
                containers_of(&pod),
                expected,
                "stripped: {phase} {statuses:?}"
            );
            let kept = pod.status.as_ref().unwrap().container_statuses.as_ref();
            assert!(kept.is_none_or(|k| k.len() == 1));
            // Stripping twice changes nothing.
            let once = pod.clone();
            strip_pod(&mut pod, &BTreeSet::new());
            assert_eq!(pod, once);
        }
    }
}
