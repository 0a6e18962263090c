//! What the operator would do if a ConsumerPool had another number of
//! eligible pods (`kubectl shardring plan --replicas N`): the pool's pods
//! are scaled in a [`Snapshot`] as its workload would scale them (new pods
//! added Ready; on a scale-down a StatefulSet's highest ordinals go, or
//! else the most recently Ready pods, as a ReplicaSet picks them), and every
//! group of the pool is planned by the core's plan step, one after another
//! so each deal sees the documents planned before it, with pacing lifted
//! (no rebalance delay, no move budget): the moves it makes and where every
//! shard ends up once its handoff completes. Nothing is written.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;
use shardring_core::plan::{eligible, plan};

use super::snapshot::Snapshot;
use crate::crds::{AssignmentDocument, ConsumerPool, ShardPhase};

/// Why a what-if cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    /// No pool of that name.
    #[error("no ConsumerPool {pool:?} in namespace {namespace}")]
    NoPool {
        /// The pool.
        pool: String,
        /// The namespace.
        namespace: String,
    },
    /// New pods cannot be made for a selector without `matchLabels`.
    #[error(
        "ConsumerPool {0:?} selects its pods with matchExpressions only, so a new pod's labels are unknown; \
         give its selector matchLabels, or ask for fewer replicas than it has"
    )]
    NoLabels(String),
}

/// One group's part of a what-if.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupWhatIf {
    /// The group.
    pub group: String,
    /// Moves forced by pods that go (required) and made to balance
    /// (optional).
    pub required: u64,
    /// See `required`.
    pub optional: u64,
    /// Fewest and most of its shards on one eligible pod afterwards.
    pub spread: (u64, u64),
    /// Why it could not be planned (its Ready condition's message), if so.
    pub problem: Option<String>,
}

/// A pool's what-if.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhatIf {
    /// The pool.
    pub pool: String,
    /// Its eligible pods now.
    pub replicas_now: usize,
    /// The pods the what-if adds and removes.
    pub added: Vec<String>,
    /// See `added`.
    pub removed: Vec<String>,
    /// Each group of the pool, by name.
    pub groups: Vec<GroupWhatIf>,
    /// Each eligible pod's active shards over the pool's groups, now and
    /// after.
    pub before: BTreeMap<String, u64>,
    /// See `before`.
    pub after: BTreeMap<String, u64>,
}

/// Who reads each shard of `document` once its handoffs complete: the
/// owner of an active (or held) shard, the next owner of a revoking one.
fn final_owners(document: &AssignmentDocument) -> impl Iterator<Item = &str> {
    document
        .shards
        .values()
        .filter_map(|record| match record.state {
            ShardPhase::Revoking => record.handoff.as_ref().and_then(|h| h.to.as_deref()),
            ShardPhase::Active | ShardPhase::Held => record.owner.as_deref(),
            ShardPhase::Pending | ShardPhase::Complete => None,
        })
}

/// The StatefulSet that owns `pod`, if one does.
fn owning_set(pod: &Pod) -> Option<String> {
    pod.owner_references()
        .iter()
        .find(|o| o.kind == "StatefulSet" && o.controller == Some(true))
        .map(|o| o.name.clone())
}

/// The ordinal of a StatefulSet pod's name (`<set>-<n>`).
fn ordinal(pod: &Pod, set: &str) -> Option<u32> {
    pod.name_any()
        .strip_prefix(set)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// A new pod of `pool`, Ready long enough to be eligible, named `name`,
/// owned by `set` when the pool's pods are a StatefulSet's.
fn new_pod(
    pool: &ConsumerPool,
    namespace: &str,
    name: &str,
    set: Option<&StatefulSet>,
    now: Timestamp,
) -> Result<Pod, WhatIfError> {
    let labels = pool
        .spec
        .selector
        .match_labels
        .clone()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| WhatIfError::NoLabels(pool.name_any()))?;
    let since = now - SignedDuration::from_secs(i64::from(pool.spec.min_ready_seconds) + 3600);
    let owner = set.map(|set| {
        json!([{
            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": set.name_any(),
            "uid": set.uid().unwrap_or_default(), "controller": true,
        }])
    });
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace, "labels": labels,
            "uid": format!("what-if-{name}"), "creationTimestamp": since.to_string(),
            "ownerReferences": owner.unwrap_or_else(|| json!([])),
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since.to_string()}],
        },
    });
    Ok(serde_json::from_value(pod).expect("a what-if pod is a Pod"))
}

/// The what-if of pool `pool` in `snapshot` with `replicas` eligible pods.
///
/// # Errors
/// No such pool, or new pods asked of a pool whose selector has no
/// `matchLabels`.
pub fn what_if(
    snapshot: &mut Snapshot,
    pool: &str,
    replicas: usize,
) -> Result<WhatIf, WhatIfError> {
    let namespace = snapshot.namespace().to_owned();
    let pool_object = snapshot
        .pools()
        .iter()
        .find(|p| p.name_any() == pool)
        .cloned()
        .ok_or_else(|| WhatIfError::NoPool {
            pool: pool.to_owned(),
            namespace: namespace.clone(),
        })?;
    let mut groups: Vec<_> = snapshot.groups_of(pool).into_iter().cloned().collect();
    groups.sort_by_key(ResourceExt::name_any);
    let now = snapshot.now();
    let min_ready = pool_object.spec.min_ready();
    let eligible_names = |snapshot: &Snapshot| -> Vec<String> {
        let Some(group) = snapshot.groups_of(pool).first().copied() else {
            return Vec::new();
        };
        let observation = snapshot.observation(group);
        observation
            .pods
            .iter()
            .filter(|p| eligible(p, min_ready, now))
            .map(|p| p.name.clone())
            .collect()
    };
    let current = eligible_names(snapshot);
    let before = totals(snapshot, &groups, &current);

    // The pods as the workload would leave them.
    let mut pods: Vec<Pod> = snapshot.pods().to_vec();
    let set_name = pods
        .iter()
        .filter(|p| current.contains(&p.name_any()))
        .find_map(owning_set);
    let set = set_name.as_ref().and_then(|name| {
        snapshot
            .stores()
            .stateful_sets
            .state()
            .iter()
            .find(|s| s.name_any() == *name)
            .map(|s| (**s).clone())
    });
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    if replicas > current.len() {
        let mut next = match &set_name {
            Some(set) => pods
                .iter()
                .filter_map(|p| ordinal(p, set))
                .max()
                .map_or(0, |n| n + 1),
            None => 0,
        };
        while current.len() + added.len() < replicas {
            let name = match &set_name {
                Some(set) => format!("{set}-{next}"),
                None => format!("what-if-{next}"),
            };
            next += 1;
            if pods.iter().any(|p| p.name_any() == name) {
                continue;
            }
            pods.push(new_pod(&pool_object, &namespace, &name, set.as_ref(), now)?);
            added.push(name);
        }
    } else {
        // A StatefulSet removes its highest ordinals; a ReplicaSet the pods
        // Ready most recently.
        let mut going: Vec<&Pod> = pods
            .iter()
            .filter(|p| current.contains(&p.name_any()))
            .collect();
        going.sort_by_key(|p| {
            let ordinal = set_name
                .as_ref()
                .and_then(|set| ordinal(p, set))
                .unwrap_or(0);
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0);
            std::cmp::Reverse((ordinal, ready))
        });
        removed = going
            .iter()
            .take(current.len() - replicas)
            .map(|p| p.name_any())
            .collect();
        pods.retain(|p| !removed.contains(&p.name_any()));
    }
    snapshot.replace_pods(pods);
    if let Some(mut set) = set {
        // The StatefulSet scaled to the new count: its removed ordinals do
        // not come back (stable identity would hold for them otherwise).
        let replicas = i32::try_from(replicas).unwrap_or(i32::MAX);
        set.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
        snapshot.replace_stateful_set(set);
    }

    let mut planned = Vec::with_capacity(groups.len());
    for group in &groups {
        let mut lifted = group.clone();
        lifted.spec.rebalance.delay = "0s".into();
        lifted.spec.rebalance.initial_delay = "0s".into();
        lifted.spec.rebalance.max_moves_per_window = None;
        let decision = plan(&snapshot.observation(&lifted));
        let problem = decision
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "False")
            .map(|c| format!("{}: {}", c.reason, c.message));
        if let Some(write) = &decision.document_write {
            snapshot.publish(group, write.document.clone());
        }
        planned.push((group.name_any(), decision.moves, problem));
    }
    let after_names = eligible_names(snapshot);
    let after = totals(snapshot, &groups, &after_names);
    let groups = planned
        .into_iter()
        .map(|(name, moves, problem)| {
            let group = snapshot.group(&name).expect("a listed group");
            let per_pod = totals(snapshot, std::slice::from_ref(group), &after_names);
            let fewest = per_pod.values().min().copied().unwrap_or(0);
            let most = per_pod.values().max().copied().unwrap_or(0);
            GroupWhatIf {
                group: name,
                required: moves.required,
                optional: moves.optional,
                spread: (fewest, most),
                problem,
            }
        })
        .collect();
    Ok(WhatIf {
        pool: pool.to_owned(),
        replicas_now: current.len(),
        added,
        removed,
        groups,
        before,
        after,
    })
}

/// Each of `pods`' shards over `groups` once their handoffs complete.
fn totals(
    snapshot: &Snapshot,
    groups: &[crate::crds::ShardGroup],
    pods: &[String],
) -> BTreeMap<String, u64> {
    let mut totals: BTreeMap<String, u64> = pods.iter().map(|p| (p.clone(), 0)).collect();
    for group in groups {
        if let Some(doc) = snapshot.document(group) {
            for owner in final_owners(&doc) {
                if let Some(count) = totals.get_mut(owner) {
                    *count += 1;
                }
            }
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardring_devkit::fixtures;

    const NS: &str = "team";

    fn now() -> Timestamp {
        "2026-06-01T12:00:00Z".parse().unwrap()
    }

    /// A pod of the pool, Ready since `since`, owned by StatefulSet `set`.
    fn pod(name: &str, since: &str, set: Option<&str>) -> Pod {
        let mut pod = fixtures::ready_pod(NS, name, "consumer", since);
        if let Some(set) = set {
            pod["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": set,
                "uid": "set-uid", "controller": true,
            }]);
        }
        serde_json::from_value(pod).unwrap()
    }

    fn snapshot(pods: Vec<Pod>, sets: Vec<StatefulSet>, shards: &[(&str, u32)]) -> Snapshot {
        let groups = shards
            .iter()
            .map(|(name, count)| {
                serde_json::from_value(fixtures::static_group(NS, name, "p", *count)).unwrap()
            })
            .collect();
        let pool = serde_json::from_value(fixtures::pool(NS, "p", "consumer")).unwrap();
        Snapshot::from_objects(NS, groups, vec![pool], pods, Vec::new(), sets, now())
    }

    fn set(name: &str, replicas: i32) -> StatefulSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NS, "uid": "set-uid"},
            "spec": {"replicas": replicas, "selector": {}, "serviceName": name, "template": {}},
        }))
        .unwrap()
    }

    #[test]
    fn one_more_pod_takes_its_share_in_optional_moves_only() {
        let since = "2026-06-01T10:00:00Z";
        let pods = (0..3)
            .map(|i| pod(&format!("c-{i}"), since, None))
            .collect();
        let mut snapshot = snapshot(pods, Vec::new(), &[("g", 12)]);
        // The first what-if at the pods it has publishes the first
        // assignment (in the snapshot only): 4 shards a pod.
        let first = what_if(&mut snapshot, "p", 3).unwrap();
        assert_eq!(first.after.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
        let plan = what_if(&mut snapshot, "p", 4).unwrap();
        assert_eq!(plan.added, ["what-if-0"]);
        assert_eq!(plan.replicas_now, 3);
        let group = &plan.groups[0];
        assert_eq!(
            (group.required, group.optional, group.spread),
            (0, 3, (3, 3))
        );
        assert_eq!(plan.after["what-if-0"], 3);
        assert_eq!(plan.before.values().sum::<u64>(), 12);
        assert_eq!(plan.after.values().sum::<u64>(), 12);
    }

    #[test]
    fn a_stateful_set_scales_down_from_its_highest_ordinal() {
        let since = "2026-06-01T10:00:00Z";
        let pods = (0..4)
            .map(|i| pod(&format!("web-{i}"), since, Some("web")))
            .collect();
        let mut snapshot = snapshot(pods, vec![set("web", 4)], &[("g", 8)]);
        what_if(&mut snapshot, "p", 4).unwrap();
        let plan = what_if(&mut snapshot, "p", 2).unwrap();
        assert_eq!(plan.removed, ["web-3", "web-2"]);
        let group = &plan.groups[0];
        // Their 4 shards must move (the set no longer has those ordinals,
        // so nobody waits for them), and nothing else does.
        assert_eq!(
            (group.required, group.optional, group.spread),
            (4, 0, (4, 4))
        );
    }

    #[test]
    fn other_pods_scale_down_from_the_most_recently_ready() {
        let pods = vec![
            pod("a", "2026-06-01T09:00:00Z", None),
            pod("b", "2026-06-01T11:00:00Z", None),
            pod("c", "2026-06-01T10:00:00Z", None),
        ];
        let mut snapshot = snapshot(pods, Vec::new(), &[("g", 6)]);
        let plan = what_if(&mut snapshot, "p", 1).unwrap();
        assert_eq!(plan.removed, ["b", "c"]);
        assert_eq!(plan.after.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn new_pods_need_labels_to_copy() {
        let mut snapshot = snapshot(Vec::new(), Vec::new(), &[("g", 2)]);
        assert!(matches!(
            what_if(&mut snapshot, "q", 1),
            Err(WhatIfError::NoPool { .. })
        ));
        let mut pool: ConsumerPool =
            serde_json::from_value(fixtures::pool(NS, "p", "consumer")).unwrap();
        pool.spec.selector = serde_json::from_value(json!({
            "matchExpressions": [{"key": "app", "operator": "In", "values": ["consumer"]}]
        }))
        .unwrap();
        let group = serde_json::from_value(fixtures::static_group(NS, "g", "p", 2)).unwrap();
        let mut snapshot = Snapshot::from_objects(
            NS,
            vec![group],
            vec![pool],
            Vec::new(),
            Vec::new(),
            Vec::new(),
            now(),
        );
        let error = what_if(&mut snapshot, "p", 1).unwrap_err();
        assert!(
            error.to_string().contains("matchExpressions only"),
            "{error}"
        );
    }
}
