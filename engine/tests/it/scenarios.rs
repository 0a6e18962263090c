//! Hand-written scenarios for every rule of the engine, with exact expectations.

use std::sync::Arc;

use shardring_engine::{Balance, PlanError, Pod, Previous, Rebalance, ShardState};

use crate::common::*;

#[test]
fn balances_the_issue_examples() {
    for (s, p) in [
        (10, 10),
        (10, 4),
        (64, 32),
        (256, 41),
        (1000, 64),
        (1, 3),
        (0, 2),
    ] {
        let out = run(&input(shards(s), pods(p)));
        assert!(spread(&out) <= 1, "{s} on {p}: {:?}", loads(&out));
        assert_eq!(loads(&out).iter().sum::<u64>(), s as u64);
        assert!(out.unassigned.is_empty());
        assert_eq!(out.moves, 0);
    }
}

#[test]
fn replanning_a_plan_moves_nothing() {
    let mut inp = input(shards(256), pods(41));
    let first = run(&inp);
    inp.previous = previous_of(&first);
    let second = run(&inp);
    assert_eq!(second.moves, 0);
    assert_eq!(first.assignment, second.assignment);
}

#[test]
fn adding_and_removing_a_pod_moves_the_lower_bound() {
    let mut inp = input(shards(100), pods(10));
    let first = run(&inp);
    inp.previous = previous_of(&first);
    inp.pods.push(pod("consumer-new"));
    let grown = run(&inp);
    assert!(spread(&grown) <= 1);
    assert_eq!(grown.moves, 9, "100 on 11: the new pod takes 9");
    assert_eq!(grown.moves, lower_bound(&inp.previous, &grown));
    assert_eq!(grown.optional_moves(), 9);

    inp.previous = previous_of(&grown);
    inp.pods.retain(|p| p.name != "consumer-3");
    let shrunk = run(&inp);
    assert!(spread(&shrunk) <= 1);
    assert_eq!(shrunk.moves, lower_bound(&inp.previous, &shrunk));
    assert_eq!(shrunk.required_moves(), grown.loads["consumer-3"]);
}

#[test]
fn ineligible_pods_get_nothing() {
    let mut ps = pods(4);
    ps[1].ready = false;
    ps[2].terminating = true;
    let out = run(&input(shards(10), ps));
    assert_eq!(out.loads.len(), 2);
    assert_eq!(loads(&out), vec![5, 5]);
}

#[test]
fn lifecycle_pending_children_and_complete_parents() {
    let mut ss = shards(3);
    ss[0].state = ShardState::Closed; // parent of 1, still being read
    ss[1].parents = vec![ss[0].id.clone()];
    ss[2].parents = vec!["shardId-trimmed".to_owned()]; // unknown: counts as complete
    let out = run(&input(ss.clone(), pods(2)));
    assert_eq!(out.pending, vec![ss[1].id.clone()]);
    assert_eq!(out.assignment[&ss[1].id].owner, None);
    assert!(out.assignment[&ss[0].id].owner.is_some());
    assert!(out.assignment[&ss[2].id].owner.is_some());

    ss[0].state = ShardState::Complete;
    let mut inp = input(ss.clone(), pods(2));
    inp.previous = previous_of(&out);
    let next = run(&inp);
    assert!(next.pending.is_empty());
    assert!(
        !next.assignment.contains_key(&ss[0].id),
        "complete shards drop out"
    );
    // The child goes to its parent's owner, which has room.
    assert_eq!(
        next.assignment[&ss[1].id].owner,
        out.assignment[&ss[0].id].owner
    );
    assert_eq!(next.moves, 0);
}

#[test]
fn caps_leave_the_rest_unassigned() {
    let mut inp = input(shards(10), pods(3));
    inp.options.max_shards_per_pod = 2;
    let out = run(&inp);
    assert_eq!(loads(&out), vec![2, 2, 2]);
    assert_eq!(out.unassigned.len(), 4);
    for id in &out.unassigned {
        assert_eq!(out.assignment[id].owner, None);
    }
}

#[test]
fn weighted_capacity() {
    let mut ps = pods(2);
    ps[1].capacity = 3;
    let out = run(&input(shards(10), ps));
    // 10 * 1/4 = 2.5 and 10 * 3/4 = 7.5.
    let l = loads(&out);
    assert!((l[0] == 2 || l[0] == 3) && l[0] + l[1] == 10, "{l:?}");
}

#[test]
fn required_only_moves_only_orphans() {
    let mut inp = input(shards(100), pods(10));
    let first = run(&inp);
    inp.previous = previous_of(&first);
    inp.pods.push(pod("consumer-new"));
    inp.pods[0].terminating = true;
    let inp = with_rebalance(inp, Rebalance::RequiredOnly);
    let out = run(&inp);
    assert_eq!(out.moves, first.loads["consumer-0"]);
    assert_eq!(out.optional_moves(), 0);
    // The orphans land on the new, empty pod.
    assert_eq!(out.loads["consumer-new"], first.loads["consumer-0"]);
}

#[test]
fn optional_move_budget() {
    let mut inp = input(shards(100), pods(10));
    let first = run(&inp);
    inp.previous = previous_of(&first);
    inp.pods.push(pod("consumer-new"));
    inp.options.max_optional_moves = Some(4);
    let out = run(&inp);
    assert_eq!(out.moves, 4);
    assert_eq!(out.loads["consumer-new"], 4);
}

#[test]
fn standbys_avoid_the_owner_zone() {
    let mut ps = pods(6);
    for (i, p) in ps.iter_mut().enumerate() {
        p.zone = Some(["a", "b", "c"][i % 3].to_owned());
        p.node = Some(format!("n{i}"));
    }
    let mut inp = input(shards(30), ps.clone());
    inp.options.standbys = 2;
    let out = run(&inp);
    let zone = |name: &str| ps.iter().find(|p| p.name == name).unwrap().zone.clone();
    let mut standby_load = std::collections::BTreeMap::<String, u32>::new();
    for a in out.assignment.values() {
        let owner = a.owner.as_deref().unwrap();
        assert_eq!(a.standbys.len(), 2);
        let mut zones = vec![zone(owner)];
        for s in &a.standbys {
            assert_ne!(s, owner);
            zones.push(zone(s));
            *standby_load.entry(s.clone()).or_default() += 1;
        }
        zones.sort();
        zones.dedup();
        assert_eq!(zones.len(), 3, "owner and standbys in three zones: {a:?}");
    }
    assert!(standby_load.values().all(|&l| l == 10), "{standby_load:?}");
    // Sticky.
    let mut next = inp;
    next.previous = previous_of(&out);
    assert_eq!(run(&next).assignment, out.assignment);
}

#[test]
fn hash_range_bound() {
    let mut ss = ranged_shards(8);
    // Split shard 0 into two halves: 9 shards, unequal weights.
    ss[0].state = ShardState::Complete;
    let range = ss[0].hash_key_range.clone().unwrap();
    let (a, b): (u128, u128) = (range.start.parse().unwrap(), range.end.parse().unwrap());
    let mid = a + (b - a) / 2;
    for (i, (s, e)) in [(a, mid), (mid + 1, b)].into_iter().enumerate() {
        let mut child = shard(&format!("shardId-child-{i}"));
        child.parents = vec![ss[0].id.clone()];
        child.hash_key_range = Some(shardring_engine::HashKeyRange {
            start: s.to_string(),
            end: e.to_string(),
        });
        ss.push(child);
    }
    let inp = with_balance(input(ss, pods(3)), Balance::HashRange);
    let out = run(&inp);
    assert_eq!(out.assignment.len(), 9);
    assert!(out.unassigned.is_empty());
}

#[test]
fn errors_name_the_culprit() {
    let mut inp = input(shards(2), pods(2));
    let list = Arc::make_mut(&mut inp.shards);
    list[1].id = list[0].id.clone();
    assert_eq!(
        shardring_engine::plan(&inp),
        Err(PlanError::DuplicateShard("shardId-000000000000".into()))
    );
    let mut inp = input(shards(2), pods(2));
    inp.pods[1].name = "consumer-0".into();
    assert_eq!(
        shardring_engine::plan(&inp),
        Err(PlanError::DuplicatePod("consumer-0".into()))
    );
    let mut inp = input(ranged_shards(2), pods(2));
    let range = Arc::make_mut(&mut inp.shards)[0]
        .hash_key_range
        .as_mut()
        .unwrap();
    range.start = "5".into();
    range.end = "4".into();
    assert!(matches!(
        shardring_engine::plan(&inp),
        Err(PlanError::BadHashKeyRange { .. })
    ));
}

#[test]
fn previous_owner_forms_are_equivalent() {
    let mut a = input(shards(5), pods(2));
    Arc::make_mut(&mut a.previous).insert(
        "shardId-000000000000".into(),
        Previous::Owner("consumer-1".into()),
    );
    let mut b = a.clone();
    Arc::make_mut(&mut b.previous).insert(
        "shardId-000000000000".into(),
        Previous::Full {
            owner: "consumer-1".into(),
            standbys: vec![],
        },
    );
    assert_eq!(run(&a).assignment, run(&b).assignment);
}

/// Surge one new pod, then terminate one old pod, for every pod; plan
/// `requiredOnly` during the roll and `all` once at the end. Every pod
/// carries the second it became ready (`readySince`), new pods later than
/// old ones, as the controller passes them. Returns moves per shard.
fn rolling_deploy(s: usize, p: usize) -> f64 {
    let aged = |name: String, since: usize| Pod {
        ready_since: Some(i64::try_from(since).expect("a small step number")),
        ..pod(&name)
    };
    let mut inp = input(
        shards(s),
        (0..p).map(|i| aged(format!("old-{i:03}"), 0)).collect(),
    );
    let mut out = run(&inp);
    let mut total = 0;
    inp.options.rebalance = Rebalance::RequiredOnly;
    for i in 0..p {
        for step in 0..2 {
            if step == 0 {
                inp.pods.push(aged(format!("new-{i:03}"), 10 + i));
            } else {
                inp.pods.retain(|x| x.name != format!("old-{i:03}"));
            }
            inp.previous = previous_of(&out);
            out = run(&inp);
            assert!(out.unassigned.is_empty());
            total += out.moves;
        }
    }
    inp.options.rebalance = Rebalance::All;
    inp.previous = previous_of(&out);
    out = run(&inp);
    total += out.moves;
    assert!(spread(&out) <= 1);
    total as f64 / s as f64
}

#[test]
#[allow(clippy::float_cmp)] // exactly one move per shard is the point: total / s is exactly 1.0
fn rolling_deploy_moves_each_shard_exactly_once() {
    // Divisible or not: the ⌈⌉ quotas never land on an old pod that is
    // about to go, so no shard moves twice.
    for (s, p) in [(100, 10), (1000, 50), (37, 8), (6, 5), (100, 7), (5, 3)] {
        let per_shard = rolling_deploy(s, p);
        assert_eq!(per_shard, 1.0, "{s} on {p}: {per_shard:.3} moves per shard");
    }
}

#[test]
fn hash_range_with_equal_shards_balances_counts() {
    for (s, p) in [(12, 5), (64, 7), (100, 9)] {
        let out = run(&with_balance(
            input(ranged_shards(s), pods(p)),
            Balance::HashRange,
        ));
        assert!(spread(&out) <= 1, "{s} on {p}: {:?}", loads(&out));
    }
}
