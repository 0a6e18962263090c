//! Unit tests of the observe step: what a pod's status says of its
//! containers, the pod info the evidence rule reads, and label selectors.

use super::*;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta, Time};

fn running() -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    }
}

fn terminated() -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 143,
            reason: Some("Error".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn waiting(reason: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn status(name: &str, state: ContainerState) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: "consumer:1".into(),
        state: Some(state),
        ..Default::default()
    }
}

/// A pod in `phase` with container statuses `containers` (and init
/// container statuses `init`), terminating or not.
fn pod_with(
    phase: &str,
    terminating: bool,
    containers: Vec<ContainerStatus>,
    init: Vec<ContainerStatus>,
) -> CachedPod {
    CachedPod::from(&Pod {
        metadata: ObjectMeta {
            name: Some("consumer-0".into()),
            deletion_timestamp: terminating.then_some(Time(Timestamp::UNIX_EPOCH)),
            ..Default::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: (!containers.is_empty()).then_some(containers),
            init_container_statuses: (!init.is_empty()).then_some(init),
            ..Default::default()
        }),
    })
}

#[test]
fn a_terminating_pod_whose_containers_all_terminated_is_stopped() {
    let done = vec![
        status("consumer", terminated()),
        status("sidecar", terminated()),
    ];
    let init = vec![status("init", terminated())];
    let pod = pod_with("Running", true, done.clone(), init.clone());
    assert_eq!(containers_of(&pod), Containers::Stopped);
    // The kubelet's terminal phase for a deleted pod, too.
    let pod = pod_with("Failed", true, done.clone(), init.clone());
    assert_eq!(containers_of(&pod), Containers::Stopped);
    // An evicted pod: terminal phase, not deleted yet; never restarted.
    let pod = pod_with("Failed", false, done, init);
    assert_eq!(containers_of(&pod), Containers::Stopped);
}

#[test]
fn a_container_that_may_run_is_running() {
    // Terminating, one container still running (the kubelet is
    // stopping it, or stopped reporting).
    let pod = pod_with(
        "Running",
        true,
        vec![
            status("consumer", terminated()),
            status("sidecar", running()),
        ],
        vec![],
    );
    assert_eq!(containers_of(&pod), Containers::Running);
    // A sidecar (restartable init container) still running.
    let pod = pod_with(
        "Running",
        true,
        vec![status("consumer", terminated())],
        vec![status("proxy", running())],
    );
    assert_eq!(containers_of(&pod), Containers::Running);
    // Not terminating: a terminated container is restarted.
    let pod = pod_with(
        "Running",
        false,
        vec![status("consumer", terminated())],
        vec![],
    );
    assert_eq!(containers_of(&pod), Containers::Running);
    // Marked Failed by the pod garbage collector (its node is gone), the
    // container statuses untouched: nothing says the process stopped.
    let pod = pod_with("Failed", true, vec![status("consumer", running())], vec![]);
    assert_eq!(containers_of(&pod), Containers::Running);
    // Terminating with no container status at all: nothing concluded.
    let pod = pod_with("Running", true, vec![], vec![]);
    assert_eq!(containers_of(&pod), Containers::Running);
    // No status at all.
    let mut pod = pod_with("Running", true, vec![], vec![]);
    pod.status = None;
    assert_eq!(containers_of(&pod), Containers::Running);
}

#[test]
fn a_pending_pod_that_never_started_anything_never_ran() {
    // Unscheduled: no container status yet.
    let pod = pod_with("Pending", false, vec![], vec![]);
    assert_eq!(containers_of(&pod), Containers::NeverRan);
    // Stuck in image pull, terminating or not.
    for terminating in [false, true] {
        let pod = pod_with(
            "Pending",
            terminating,
            vec![status("consumer", waiting("ImagePullBackOff"))],
            vec![status("init", waiting("PodInitializing"))],
        );
        assert_eq!(containers_of(&pod), Containers::NeverRan);
    }
    // Waiting after it ran once (a crash loop): it ran.
    let mut crashed = status("consumer", waiting("CrashLoopBackOff"));
    crashed.last_state = Some(terminated());
    let pod = pod_with("Pending", false, vec![crashed], vec![]);
    assert_eq!(containers_of(&pod), Containers::Running);
    // One container running while another waits for its image: the
    // kubelet reports `Pending`, but something runs.
    let pod = pod_with(
        "Pending",
        false,
        vec![
            status("consumer", running()),
            status("sidecar", waiting("ErrImagePull")),
        ],
        vec![],
    );
    assert_eq!(containers_of(&pod), Containers::Running);
    // An init container that ran (it may have read something).
    let pod = pod_with(
        "Pending",
        false,
        vec![status("consumer", waiting("PodInitializing"))],
        vec![status("init", running())],
    );
    assert_eq!(containers_of(&pod), Containers::Running);
    // `Running` with no statuses is no `Pending`: nothing concluded.
    let pod = pod_with("Running", false, vec![], vec![]);
    assert_eq!(containers_of(&pod), Containers::Running);
}

#[test]
fn pod_info_carries_what_the_evidence_rule_reads() {
    let mut pod = pod_with("Running", true, vec![status("c", terminated())], vec![]);
    pod.metadata.generate_name = Some("consumer-7d9f-".into());
    pod.metadata.name = Some("consumer-7d9f-abcde".into());
    pod.metadata.creation_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    let info = pod_info(&pod, None);
    assert_eq!(info.containers, Containers::Stopped);
    assert_eq!(info.created, Some(Timestamp::UNIX_EPOCH));
    assert!(info.generated_name);
    // A StatefulSet's pod: its name is its own, and comes back.
    pod.metadata.generate_name = None;
    pod.metadata.name = Some("consumer-0".into());
    assert!(!pod_info(&pod, None).generated_name);
    pod.metadata.generate_name = Some("other-".into());
    assert!(!has_generated_name(&pod.metadata));
}

#[test]
fn pod_info_keeps_only_the_capacity_label_and_reads_the_zone_from_all() {
    let mut pod = pod_with("Running", true, vec![], vec![]);
    pod.metadata.labels = Some(labels(&[("app", "c"), ("weight", "4"), (ZONE_LABEL, "z1")]));
    let info = pod_info(&pod, Some("weight"));
    assert_eq!(info.labels, labels(&[("weight", "4")]));
    assert_eq!(info.zone.as_deref(), Some("z1"));
    let info = pod_info(&pod, None);
    assert!(info.labels.is_empty());
    let info = pod_info(&pod, Some("absent"));
    assert!(info.labels.is_empty());
}

/// What the plan step sees of `pod`, selected, with `capacity_label`.
fn pod_info(pod: &CachedPod, capacity_label: Option<&str>) -> PodInfo {
    let record = PodRecord::from(pod);
    let mut seen = collect_pods(
        std::iter::once(&record),
        |_| true,
        capacity_label,
        "",
        |_| None,
    );
    seen.remove(0)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn selector_semantics() {
    let sel = LabelSelector {
        match_labels: Some(labels(&[("app", "c")])),
        match_expressions: Some(vec![
            LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["a".into()]),
            },
            LabelSelectorRequirement {
                key: "off".into(),
                operator: "DoesNotExist".into(),
                values: None,
            },
        ]),
    };
    assert!(PodSelector::new(&sel).matches(Some(&labels(&[("app", "c"), ("tier", "a")]))));
    assert!(!PodSelector::new(&sel).matches(Some(&labels(&[("app", "c"), ("tier", "b")]))));
    assert!(!PodSelector::new(&sel).matches(Some(&labels(&[
        ("app", "c"),
        ("tier", "a"),
        ("off", "1")
    ]))));
    assert!(!PodSelector::new(&sel).matches(None));
    assert!(PodSelector::new(&LabelSelector::default()).matches(None));
    let refused = LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "tier".into(),
            operator: "Near".into(),
            values: None,
        }]),
    };
    assert!(!PodSelector::new(&refused).matches(Some(&labels(&[("tier", "a")]))));
}

#[test]
fn a_pool_event_wakes_its_groups_or_every_group_of_a_namespace_of_several_pools() {
    let group = |ns: &str, name: &str, pool: &str| {
        let mut g = crate::crds::fixtures::static_group(ns, name, pool, 2, "s-{index}");
        g.metadata.namespace = Some(ns.into());
        Arc::new(DeserializeGuard(Ok(g)))
    };
    let names = |refs: Vec<ObjectRef<DeserializeGuard<ShardGroup>>>| -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    };
    let one_pool = [
        group("a", "g-1", "p"),
        group("a", "g-2", "p"),
        group("b", "g-3", "p"),
    ];
    assert_eq!(names(groups_for_pool("a", "p", &one_pool)), ["g-1", "g-2"]);
    // Pools p and q in namespace a may share pods: a change of q (its
    // selector, its deletion) may change p's groups' balance.
    let two_pools = [
        group("a", "g-1", "p"),
        group("a", "g-2", "q"),
        group("b", "g-3", "r"),
    ];
    assert_eq!(names(groups_for_pool("a", "q", &two_pools)), ["g-1", "g-2"]);
    assert_eq!(names(groups_for_pool("b", "r", &two_pools)), ["g-3"]);
}
