//! The pod cache: records by namespace in name order, updates and
//! deletions, shared label sets, and a relist that replaces the set only
//! once it is complete.

use super::*;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;
use shardring_core::observation::Containers;

fn pod(namespace: &str, name: &str, labels: &[(&str, &str)]) -> CachedPod {
    CachedPod::from(&Pod {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: None,
        status: None,
    })
}

fn names(cache: &PodRecords, namespace: &str) -> Vec<String> {
    cache.read_namespace(namespace, |pods| pods.map(|p| p.name.clone()).collect())
}

fn apply(cache: &PodRecords, pod: CachedPod) {
    cache.apply_watcher_event(&watcher::Event::Apply(pod));
}

#[test]
fn a_namespace_reads_its_own_pods_in_name_order() {
    let cache = PodRecords::default();
    for (ns, name) in [("a", "c-2"), ("b", "c-1"), ("a", "c-0"), ("a", "c-1")] {
        apply(&cache, pod(ns, name, &[("app", "c")]));
    }
    assert_eq!(names(&cache, "a"), ["c-0", "c-1", "c-2"]);
    assert_eq!(names(&cache, "b"), ["c-1"]);
    assert!(names(&cache, "none").is_empty());
    assert_eq!(cache.len(), 4);
    // An update replaces the record; a deletion removes it.
    apply(&cache, pod("a", "c-1", &[("app", "d")]));
    assert_eq!(cache.get("a", "c-1").unwrap().labels["app"], "d");
    cache.apply_watcher_event(&watcher::Event::Delete(pod("a", "c-1", &[])));
    assert_eq!(names(&cache, "a"), ["c-0", "c-2"]);
    cache.apply_watcher_event(&watcher::Event::Delete(pod("b", "c-1", &[])));
    assert!(names(&cache, "b").is_empty());
    assert_eq!(cache.len(), 2);
}

#[test]
fn pods_with_the_same_labels_share_one_label_set() {
    let cache = PodRecords::default();
    for i in 0..10 {
        apply(
            &cache,
            pod("a", &format!("c-{i}"), &[("app", "c"), ("hash", "1")]),
        );
    }
    let first = cache.get("a", "c-0").unwrap();
    let last = cache.get("a", "c-9").unwrap();
    assert!(Arc::ptr_eq(&first.labels, &last.labels));
    assert_eq!(cache.label_sets(), 1);
    // Sets nobody holds any more are swept as new ones come: the count
    // stays within twice the live sets (and a floor of 64).
    for round in 0..500 {
        apply(
            &cache,
            pod("a", "c-0", &[("app", "c"), ("hash", &round.to_string())]),
        );
    }
    assert!(cache.label_sets() <= 2 * 64 + 1, "{}", cache.label_sets());
    drop((first, last));
}

#[test]
fn a_relist_replaces_the_pods_once_it_is_complete() {
    let cache = PodRecords::default();
    apply(&cache, pod("a", "gone", &[]));
    apply(&cache, pod("a", "kept", &[]));
    cache.apply_watcher_event(&watcher::Event::Init);
    cache.apply_watcher_event(&watcher::Event::InitApply(pod("a", "kept", &[])));
    cache.apply_watcher_event(&watcher::Event::InitApply(pod("a", "new", &[])));
    // Until the list is complete, reads see the pods as they were.
    assert_eq!(names(&cache, "a"), ["gone", "kept"]);
    cache.apply_watcher_event(&watcher::Event::InitDone);
    assert_eq!(names(&cache, "a"), ["kept", "new"]);
}

#[test]
fn a_record_holds_what_the_observe_step_reads() {
    let at = Time("2026-01-01T00:00:00Z".parse().unwrap());
    let mut full = Pod {
        metadata: ObjectMeta {
            namespace: Some("a".into()),
            name: Some("consumer-7d9f-abcde".into()),
            generate_name: Some("consumer-7d9f-".into()),
            uid: Some("u".into()),
            creation_timestamp: Some(at.clone()),
            deletion_timestamp: Some(at.clone()),
            deletion_grace_period_seconds: Some(30),
            annotations: Some(
                [
                    ("assignment.shardring.io/g".to_owned(), "{}".to_owned()),
                    ("other".to_owned(), "x".to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("10.0.0.7".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(at.clone()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    };
    let record = PodRecord::from(&CachedPod::from(&full));
    assert_eq!(record.name, "consumer-7d9f-abcde");
    assert_eq!(record.uid, "u");
    assert!(record.generated_name);
    assert_eq!(record.created, Some(at.0));
    assert_eq!(record.deletion_timestamp, Some(at.0));
    assert_eq!(record.deletion_grace_seconds, Some(30));
    assert_eq!(record.node_name.as_deref(), Some("node-a"));
    assert!(record.ready);
    assert_eq!(record.ready_since, Some(at.0));
    assert_eq!(record.containers, Containers::Running);
    assert_eq!(record.ip, Some("10.0.0.7".parse().unwrap()));
    assert_eq!(record.annotation("assignment.shardring.io/g"), Some("{}"));
    assert_eq!(
        record.annotation("other"),
        None,
        "only shardring's annotations are kept"
    );
    full.status = None;
    assert!(!PodRecord::from(&CachedPod::from(&full)).ready);
}

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

/// Pods in every state the evidence rule distinguishes: the record
/// says what their container statuses say.
#[test]
fn a_record_reads_the_containers_of_the_pod_as_delivered() {
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
                deletion_timestamp: terminating.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(statuses.clone()),
                ..Default::default()
            }),
        };
        let record = PodRecord::from(&CachedPod::from(&full));
        assert_eq!(record.containers, expected, "{phase} {statuses:?}");
    }
}

#[test]
fn custom_annotation_keys_are_kept_once_the_groups_name_them() {
    let cache = PodRecords::default();
    let mut carrier = pod("ns", "c-0", &[]);
    carrier.metadata.annotations = Some(
        [
            ("example.com/shards", "v"),
            ("assignment.shardring.io/g", "{}"),
            ("other", "x"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into(),
    );
    apply(&cache, carrier.clone());
    let record = cache.get("ns", "c-0").unwrap();
    assert_eq!(record.annotation("example.com/shards"), None);
    assert_eq!(record.annotation("assignment.shardring.io/g"), Some("{}"));
    cache.keep_annotations(["example.com/shards".to_owned()].into());
    apply(&cache, carrier);
    let record = cache.get("ns", "c-0").unwrap();
    assert_eq!(record.annotation("example.com/shards"), Some("v"));
    assert_eq!(record.annotation("assignment.shardring.io/g"), Some("{}"));
    assert_eq!(record.annotation("other"), None);
}

/// `pod` as kubelet leaves it: scheduled on `node`, Ready as `ready` says.
fn with_status(mut pod: Pod, ready: bool, conditions: &[&str], node: &str) -> Pod {
    let condition = |type_: &str, status: bool| PodCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        last_transition_time: Some(Time(Timestamp::from_second(100).unwrap())),
        ..Default::default()
    };
    let mut all: Vec<PodCondition> = conditions.iter().map(|c| condition(c, true)).collect();
    all.push(condition("Ready", ready));
    pod.spec = Some(PodSpec {
        node_name: Some(node.into()),
        ..Default::default()
    });
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        conditions: Some(all),
        ..Default::default()
    });
    pod
}

#[test]
fn an_update_changes_the_cache_only_when_it_changes_what_a_reconcile_reads() {
    let cache = PodRecords::default();
    let base = Pod {
        metadata: ObjectMeta {
            namespace: Some("a".into()),
            name: Some("c-0".into()),
            uid: Some("uid-c-0".into()),
            labels: Some([("app".to_owned(), "c".to_owned())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let changes =
        |pod: &Pod| cache.apply_watcher_event(&watcher::Event::Apply(CachedPod::from(pod)));
    let scheduled = with_status(base.clone(), false, &["PodScheduled"], "node-1");
    assert!(changes(&scheduled), "a new pod");
    assert!(!changes(&scheduled), "the same pod again");

    // kubelet's writes between scheduling and Ready, and another tool's
    // annotation: nothing a decision reads.
    let mut starting = with_status(
        base.clone(),
        false,
        &["PodScheduled", "Initialized", "PodReadyToStartContainers"],
        "node-1",
    );
    starting.metadata.resource_version = Some("7".into());
    starting.metadata.annotations =
        Some([("example.com/owner".to_owned(), "team".to_owned())].into());
    let status = starting.status.as_mut().unwrap();
    status.host_ip = Some("10.0.0.1".into());
    status.start_time = Some(Time(Timestamp::from_second(90).unwrap()));
    assert!(
        !changes(&starting),
        "conditions, host IP, start time, a foreign annotation"
    );

    // What the plan reads: Ready, its pod IP, shardring's annotation, labels.
    let mut ready = with_status(base, true, &["PodScheduled"], "node-1");
    assert!(changes(&ready), "Ready");
    ready.status.as_mut().unwrap().pod_ip = Some("10.1.0.7".into());
    assert!(changes(&ready), "its pod IP");
    ready.metadata.annotations =
        Some([(format!("{ANNOTATION_PREFIX}orders"), "{}".to_owned())].into());
    assert!(changes(&ready), "shardring's annotation");
    ready.metadata.labels = Some([("app".to_owned(), "d".to_owned())].into());
    assert!(changes(&ready), "a label");
    assert!(!changes(&ready), "as cached");
    assert!(cache.apply_watcher_event(&watcher::Event::Delete(CachedPod::from(&ready))));
}
