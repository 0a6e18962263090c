//! The pod as the operator's cache holds it: a Kubernetes `Pod` with only
//! the fields the observe step and the memory of departed pods read, and
//! what those fields say (its containers, whether its name was generated).
//!
//! The pod watch decodes the API server's JSON straight into [`CachedPod`]
//! (serde skips every field not declared here), so the spec's containers,
//! volumes and the rest of the status are never allocated. k8s-openapi's
//! `Pod` is large even with every optional field empty (its `PodSpec` alone
//! has dozens of inline fields), and thousands of them were most of the
//! operator's steady-state heap. It lives only while its event is handled:
//! the pod cache keeps a compact record of it
//! ([`super::pod_cache::PodRecord`]).
//!
//! It is the same resource as `v1/Pod` (same group, kind and path), so it
//! is listed, watched and patched with `Api<CachedPod>` like the full type.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use shardring_core::observation::Containers;

/// A pod, with what shardring reads of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CachedPod {
    /// The pod's metadata.
    pub metadata: ObjectMeta,
    /// `spec.nodeName` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<CachedPodSpec>,
    /// The phase, the conditions and what the container statuses say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CachedPodStatus>,
}

/// What is kept of a pod's spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    /// The node the pod is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

/// What is kept of a pod's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The pod's conditions (the record reads `Ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<CachedCondition>>,
    /// The regular containers' states.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<CachedContainerStatus>>,
    /// The init containers' states.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<CachedContainerStatus>>,
    /// The ephemeral containers' states.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_container_statuses: Option<Vec<CachedContainerStatus>>,
    /// The pod's IP: the consumer endpoint checks callers come from it.
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
}

/// A pod condition: its type, status and last transition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedCondition {
    /// E.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// A container status: which states it is and was in, nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainerStatus {
    /// The current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<CachedContainerState>,
    /// The previous state (set once the container ran before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_state: Option<CachedContainerState>,
}

/// Which of a container state's variants is set (their details are dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedContainerState {
    /// Set when running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Present>,
    /// Set when terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<Present>,
}

/// An object whose presence is all that is kept (decoded from any object).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Present {}

impl k8s_openapi::Resource for CachedPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for CachedPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<&Pod> for CachedPod {
    /// Decodes `pod`'s JSON form as the watch decodes the API server's: what
    /// the pod watch delivers of it.
    fn from(pod: &Pod) -> Self {
        let json = serde_json::to_value(pod).expect("a Pod serializes to JSON");
        serde_json::from_value(json).expect("every Pod decodes as a CachedPod")
    }
}

/// What the status of `pod` says of its containers (see [`Containers`]).
pub(crate) fn containers_of(pod: &CachedPod) -> Containers {
    let Some(status) = pod.status.as_ref() else {
        return Containers::Running;
    };
    let lists = [
        status.container_statuses.as_deref().unwrap_or_default(),
        status
            .init_container_statuses
            .as_deref()
            .unwrap_or_default(),
        status
            .ephemeral_container_statuses
            .as_deref()
            .unwrap_or_default(),
    ];
    let all = || lists.iter().flat_map(|l| l.iter());
    let phase = status.phase.as_deref();
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let terminal = matches!(phase, Some("Succeeded" | "Failed"));
    let regular = status.container_statuses.as_deref().unwrap_or_default();
    if (terminating || terminal) && !regular.is_empty() && all().all(is_terminated) {
        return Containers::Stopped;
    }
    if phase == Some("Pending") && !all().any(ever_started) {
        return Containers::NeverRan;
    }
    Containers::Running
}

fn is_terminated(status: &CachedContainerStatus) -> bool {
    status
        .state
        .as_ref()
        .is_some_and(|s| s.terminated.is_some())
}

fn ever_started(status: &CachedContainerStatus) -> bool {
    let started = |s: &CachedContainerState| s.running.is_some() || s.terminated.is_some();
    status.state.as_ref().is_some_and(started) || status.last_state.as_ref().is_some_and(started)
}

/// Whether the API server generated the pod's name from
/// `metadata.generateName` (a Deployment's pods): such a name is not reused
/// by a later pod, unlike a StatefulSet's.
pub(crate) fn has_generated_name(meta: &ObjectMeta) -> bool {
    match (meta.generate_name.as_deref(), meta.name.as_deref()) {
        (Some(prefix), Some(name)) => !prefix.is_empty() && name.starts_with(prefix),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
        PodCondition, PodSpec, PodStatus,
    };

    #[test]
    fn decodes_what_the_operator_reads_from_a_full_pod() {
        let at = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("c-0".into()),
                uid: Some("u0".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node-a".into()),
                containers: vec![Default::default()],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some("10.0.0.1".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(at.clone()),
                    message: Some("ignored".into()),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "consumer".into(),
                    image: "consumer:1".into(),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning::default()),
                        ..Default::default()
                    }),
                    last_state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 1,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        let cached = CachedPod::from(&pod);
        assert_eq!(cached.metadata, pod.metadata);
        assert_eq!(
            cached.spec.and_then(|s| s.node_name).as_deref(),
            Some("node-a")
        );
        let status = cached.status.expect("a status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let conditions = status.conditions.expect("conditions");
        assert_eq!(
            conditions,
            vec![CachedCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(at),
            }]
        );
        let containers = status.container_statuses.expect("container statuses");
        assert_eq!(
            containers,
            vec![CachedContainerStatus {
                state: Some(CachedContainerState {
                    running: Some(Present {}),
                    terminated: None,
                }),
                last_state: Some(CachedContainerState {
                    running: None,
                    terminated: Some(Present {}),
                }),
            }]
        );
    }

    #[test]
    fn is_the_pod_resource() {
        use kube::Resource as _;
        assert_eq!(CachedPod::kind(&()), "Pod");
        assert_eq!(CachedPod::api_version(&()), "v1");
        assert_eq!(CachedPod::plural(&()), "pods");
        assert_eq!(
            CachedPod::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/pods"
        );
    }
}
