//! Standby slots in a pool's deal where topology keeps some pods over
//! their slot quota: every other pod over its quota still gives its
//! extra slots to the pods under theirs where that puts no standby in a
//! worse place (found by the simulation's pool seeds, where a new
//! leader's deal then moved a standby of a pool at rest).

use std::collections::BTreeMap;

use shardring_engine::{PlanInput, PlanOptions, PlanOutput, Pod, Previous, Shard, plan};

use crate::common::shards;

/// The plan of `shards` on `pods` with two standbys each, from the
/// previous owners and standbys given in shard order, with the pool's
/// slot ceilings `ceilings`.
fn plan_from(
    pods: &[Pod],
    shards: &[Shard],
    owners: &[&str],
    standbys: &[&[&str]],
    ceilings: Option<Vec<String>>,
) -> PlanOutput {
    let previous: BTreeMap<String, Previous> = shards
        .iter()
        .zip(owners.iter().zip(standbys))
        .map(|(shard, (owner, standbys))| {
            let previous = Previous::Full {
                owner: (*owner).to_owned(),
                standbys: standbys.iter().map(|s| (*s).to_owned()).collect(),
            };
            (shard.id.clone(), previous)
        })
        .collect();
    let input = PlanInput {
        options: PlanOptions {
            consumer_name: "ns/g".into(),
            standbys: 2,
            ..PlanOptions::default()
        },
        shards: shards.to_vec().into(),
        pods: pods.to_vec(),
        previous: previous.into(),
        standby_ceilings: ceilings,
        ..PlanInput::default()
    };
    plan(&input).expect("plan")
}

fn pod(name: &str, node: &str) -> Pod {
    Pod {
        name: name.to_owned(),
        ready: true,
        terminating: false,
        capacity: 1,
        zone: None,
        node: Some(node.to_owned()),
        ready_since: Some(0),
    }
}

/// Five pods, three on node `a` (p-0, p-3, p-4), p-1 alone on `b`, p-2
/// alone on `c`; ten shards, two per pod, with two standbys each (20
/// slots, 4 per pod). A shard owned on `a` can only have p-1 and p-2 as
/// standbys, so both are over their quota whatever the plan does (6 slots
/// each at best): topology beats even spread. But p-2 also holds a slot
/// of p-1's shard `2`, which a pod on `a` can take without a worse place:
/// it must move, even though p-1, first in order, can move none of its
/// extra slots.
#[test]
fn a_pod_kept_over_its_quota_does_not_keep_the_others_there() {
    let pods = vec![
        pod("p-0", "a"),
        pod("p-1", "b"),
        pod("p-2", "c"),
        pod("p-3", "a"),
        pod("p-4", "a"),
    ];
    let shards = shards(10);
    let owners = [
        "p-0", "p-0", "p-1", "p-1", "p-2", "p-2", "p-3", "p-3", "p-4", "p-4",
    ];
    let standbys: [&[&str]; 10] = [
        &["p-1", "p-2"],
        &["p-1", "p-2"],
        &["p-0", "p-2"],
        &["p-0", "p-4"],
        &["p-0", "p-3"],
        &["p-3", "p-4"],
        &["p-1", "p-2"],
        &["p-1", "p-2"],
        &["p-1", "p-2"],
        &["p-1", "p-2"],
    ];
    // In a pool's deal: 20 slots over 5 pods leave no extra slot.
    let out = plan_from(&pods, &shards, &owners, &standbys, Some(Vec::new()));
    let mut slots: BTreeMap<&str, u64> = BTreeMap::new();
    for a in out.assignment.values() {
        for pod in &a.standbys {
            *slots.entry(pod.as_str()).or_insert(0) += 1;
        }
    }
    assert_eq!(out.moves, 0, "no owner moves");
    // p-1 and p-2 keep the slots of every shard owned on `a` (6 each);
    // p-2's slot of shard 2 went to a pod on `a`.
    assert_eq!(slots["p-1"], 6, "{slots:?}");
    assert_eq!(slots["p-2"], 6, "{slots:?}");
    let second = &out.assignment[&shards[2].id].standbys;
    assert!(!second.contains(&"p-2".to_owned()), "{second:?}");
}

/// Four pods, three on node `a` (p-0, p-1, p-3) and p-2 alone on `b`;
/// three shards owned by p-2, p-0 and p-1 with two standbys each. A shard
/// owned on `a` has only p-2 on another node, so its second standby must
/// share its owner's node: topology allows no better. Planning again from
/// its own output must keep every standby (a pool at rest writes
/// nothing). The pool simulation's seed 19177 found the plan alternating
/// between two placements every reconcile: the same-node standbys were
/// not kept, and placed again without preferring where they were.
#[test]
fn a_standby_on_its_owners_node_stays_when_no_other_node_has_room() {
    let pods = vec![
        pod("p-0", "a"),
        pod("p-1", "a"),
        pod("p-2", "b"),
        pod("p-3", "a"),
    ];
    let shards = shards(3);
    let owners = ["p-2", "p-0", "p-1"];
    for standbys in [
        [["p-1", "p-3"], ["p-2", "p-3"], ["p-0", "p-2"]],
        [["p-0", "p-3"], ["p-1", "p-2"], ["p-2", "p-3"]],
    ] {
        for ceilings in [Some(vec!["p-2".to_owned(), "p-3".to_owned()]), None] {
            let lists: Vec<&[&str]> = standbys.iter().map(|l| &l[..]).collect();
            let out = plan_from(&pods, &shards, &owners, &lists, ceilings.clone());
            for (shard, want) in shards.iter().zip(standbys) {
                let got = &out.assignment[&shard.id].standbys;
                assert_eq!(got, &want, "{} with ceilings {ceilings:?}", shard.id);
            }
        }
    }
}
