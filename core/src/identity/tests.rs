//! Stable identity through the real plan step: a StatefulSet's rolling
//! restart and a container restart move no shard (held, then active on the
//! same pod again at a higher epoch), a scale-down and a Deployment's pod
//! move at once, a pod that does not return loses its shards when the
//! window ends, another pod of the name is not trusted without evidence,
//! a restarted operator keeps the deadline the document records, and a
//! pool's groups keep their deal through a restart under a name, planned
//! with their memories (large ones prepared between plans) as without.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::crds::consumer_pool::IdentitySpec;
use crate::crds::fixtures;
use crate::departures::{Departure, Departures};
use crate::observation::{Containers, Observation, Published, TopologyObservation};
use crate::plan::{Decision, PlanMemory, plan, plan_with};
use crate::topology::Topology;

fn t0() -> Timestamp {
    "2026-11-21T12:00:00Z".parse().unwrap()
}

fn secs(s: i64) -> SignedDuration {
    SignedDuration::from_secs(s)
}

/// Pod `web-{i}` of StatefulSet `web`, Ready for an hour.
fn member(i: usize, uid: &str) -> PodInfo {
    PodInfo {
        name: format!("web-{i}"),
        uid: uid.into(),
        selected: true,
        ready: true,
        ready_since: Some(t0() - secs(3_600)),
        node_name: Some("node-1".into()),
        containers: Containers::Running,
        created: Some(t0() - secs(3_600)),
        generated_name: false,
        stateful_set: Some("web".into()),
        ..Default::default()
    }
}

/// 12 shards on the three pods of StatefulSet `web`, settled, with the pool
/// holding for returning pods (`stable`) or not; no lease table, drain
/// timeout 30 s; the pod watch has seen every departure for a day.
fn settled(stable: bool) -> Observation {
    let mut obs = observation("orders", 12, stable);
    obs = settle(obs).0;
    obs.now = t0();
    obs
}

/// ShardGroup `name` of `count` static shards on the three pods of
/// StatefulSet `web`, nothing published yet, an hour before t0.
fn observation(name: &str, count: u32, stable: bool) -> Observation {
    let template = format!("{name}-{{index}}");
    let mut group = fixtures::static_group("prod", name, "consumers", count, &template);
    group.spec.handoff = fixtures::handoff("30s", "10s");
    let mut pool = fixtures::pool("prod", "consumers", &[], 0);
    pool.spec.identity = Some(IdentitySpec {
        stable,
        return_within: "2m".into(),
    });
    let topology = Topology::of_partitions(group.spec.source.named_partitions().unwrap());
    Observation {
        group,
        pool: Some(pool),
        pods: (0..3).map(|i| member(i, &format!("uid-{i}"))).collect(),
        topology: TopologyObservation {
            source: format!("static:{count}"),
            last_good: Some(std::sync::Arc::new(topology)),
            read_at: Some(t0() - secs(3_600)),
            ..Default::default()
        },
        published: Published::Missing,
        leases: Default::default(),
        departed: Departures {
            watched_since: Some(t0() - secs(86_400)),
            ..Default::default()
        },
        releases: Default::default(),
        loads: Default::default(),
        now: t0() - secs(3_600),
        pool_share: Default::default(),
        stateful_sets: BTreeMap::from([("web".to_owned(), 3)]),
    }
}

/// Applies the plan of `obs` as the API server would.
fn settle(obs: Observation) -> (Observation, Decision) {
    settle_with(obs, None)
}

/// [`settle`], planned with the group's `memory` when there is one, as the
/// operator's cycle plans: the decision must be the plan's without memory,
/// and a document published is prepared for the next plan.
fn settle_with(
    mut obs: Observation,
    mut memory: Option<&mut PlanMemory>,
) -> (Observation, Decision) {
    let decision = match memory.as_deref_mut() {
        Some(memory) => {
            let (decision, _) = plan_with(&obs, memory);
            assert_eq!(
                decision,
                plan(&obs),
                "the group's memory changed a decision"
            );
            decision
        }
        None => plan(&obs),
    };
    if let Some(doc) = decision.document_write.clone().map(|w| w.document) {
        if let Some(memory) = memory {
            memory.prepare(&doc);
        }
        obs.published = Published::from(doc);
    }
    for write in &decision.annotation_writes {
        if let Some(pod) = obs.pods.iter_mut().find(|p| p.name == write.pod) {
            pod.annotation = write.view.as_ref().map(|v| v.to_annotation());
        }
    }
    obs.group.status = Some(decision.status.clone().into_status());
    (obs, decision)
}

fn doc(obs: &Observation) -> &AssignmentDocument {
    obs.published.document().expect("published")
}

/// Each shard's reader: the owner of an Active shard.
fn readers(obs: &Observation) -> BTreeMap<String, String> {
    doc(obs)
        .shards
        .iter()
        .filter(|(_, r)| r.state == ShardPhase::Active)
        .filter_map(|(id, r)| Some((id.clone(), r.owner.clone()?)))
        .collect()
}

fn states_of(obs: &Observation, pod: &str) -> Vec<ShardPhase> {
    doc(obs)
        .shards
        .values()
        .filter(|r| r.owner.as_deref() == Some(pod))
        .map(|r| r.state)
        .collect()
}

/// Counts moves: a shard becoming active on another pod than the one
/// that last read it.
#[derive(Default)]
struct MoveCount {
    last: BTreeMap<String, String>,
    moves: usize,
}

impl MoveCount {
    fn see(&mut self, obs: &Observation) {
        for (shard, reader) in readers(obs) {
            if let Some(before) = self.last.insert(shard, reader.clone())
                && before != reader
            {
                self.moves += 1;
            }
        }
    }
}

/// Plans at `now`, settles, and checks that no shard is active on two
/// pods or on a pod that is not eligible.
fn step(obs: Observation, now: Timestamp, moves: &mut MoveCount) -> (Observation, Decision) {
    step_with(obs, now, moves, None)
}

/// [`step`], planned with the group's `memory` ([`settle_with`]).
fn step_with(
    obs: Observation,
    now: Timestamp,
    moves: &mut MoveCount,
    memory: Option<&mut PlanMemory>,
) -> (Observation, Decision) {
    let mut obs = obs;
    obs.now = now;
    let (obs, decision) = settle_with(obs, memory);
    for (shard, reader) in readers(&obs) {
        let pod = obs.pods.iter().find(|p| p.name == reader);
        assert!(
            pod.is_some_and(|p| p.ready && p.deletion_timestamp.is_none()),
            "{shard} active on {reader}, which is not eligible"
        );
    }
    moves.see(&obs);
    (obs, decision)
}

fn pod_mut<'a>(obs: &'a mut Observation, name: &str) -> &'a mut PodInfo {
    obs.pods.iter_mut().find(|p| p.name == name).unwrap()
}

/// Restarts `web-{i}` as a StatefulSet's rolling update does, from `at`:
/// terminating, stopped, gone, recreated (new uid, not Ready), Ready.
fn restart(mut obs: Observation, i: usize, at: Timestamp, moves: &mut MoveCount) -> Observation {
    let name = format!("web-{i}");
    let pod = pod_mut(&mut obs, &name);
    pod.deletion_timestamp = Some(at + secs(30));
    pod.deletion_grace_seconds = Some(30);
    let (mut obs, _) = step(obs, at, moves);
    assert!(
        states_of(&obs, &name)
            .iter()
            .all(|s| *s == ShardPhase::Revoking),
        "a terminating pod's shards are revoked from it"
    );
    let revoking = doc(&obs)
        .shards
        .values()
        .filter(|r| r.owner.as_deref() == Some(&name));
    for record in revoking {
        assert_eq!(
            record.handoff.as_ref().unwrap().to.as_deref(),
            Some(name.as_str())
        );
        assert!(record.return_hold.is_some());
    }
    pod_mut(&mut obs, &name).containers = Containers::Stopped;
    let (mut obs, _) = step(obs, at + secs(2), moves);
    assert!(
        states_of(&obs, &name)
            .iter()
            .all(|s| *s == ShardPhase::Held),
        "once the kubelet stopped it, its shards are held for it: {:?}",
        states_of(&obs, &name)
    );
    let old = obs.pods.iter().position(|p| p.name == name).unwrap();
    let gone = obs.pods.remove(old);
    obs.departed.pods.insert(
        name.clone(),
        vec![Departure {
            uid: gone.uid.clone(),
            at: at + secs(3),
            containers: Containers::Stopped,
            scheduled: true,
            created: gone.created,
            generated_name: false,
        }],
    );
    let (mut obs, _) = step(obs, at + secs(3), moves);
    assert!(
        states_of(&obs, &name)
            .iter()
            .all(|s| *s == ShardPhase::Held)
    );
    let mut back = member(i, &format!("uid-{i}-{}", at.as_second()));
    back.ready = false;
    back.ready_since = Some(at + secs(4));
    back.created = Some(at + secs(4));
    back.containers = Containers::NeverRan;
    obs.pods.push(back);
    obs.pods.sort_by(|a, b| a.name.cmp(&b.name));
    let (mut obs, _) = step(obs, at + secs(4), moves);
    assert!(
        states_of(&obs, &name)
            .iter()
            .all(|s| *s == ShardPhase::Held)
    );
    let view = doc(&obs).pod_view(&name);
    assert_eq!(view.held.len(), 4, "the view lists what waits for it");
    assert!(view.active.is_empty());
    let epoch = doc(&obs).epoch;
    let pod = pod_mut(&mut obs, &name);
    pod.ready = true;
    pod.ready_since = Some(at + secs(9));
    pod.containers = Containers::Running;
    let (obs, decision) = step(obs, at + secs(9), moves);
    assert!(
        states_of(&obs, &name)
            .iter()
            .all(|s| *s == ShardPhase::Active),
        "back Ready, it reads its shards again"
    );
    assert!(doc(&obs).epoch > epoch);
    assert_eq!(
        decision.holds_ended.iter().filter(|e| e.returned).count(),
        4
    );
    obs
}

#[test]
fn a_stateful_sets_rolling_restart_moves_no_shard() {
    let mut obs = settled(true);
    let mut moves = MoveCount::default();
    moves.see(&obs);
    let before = readers(&obs);
    for (at, i) in [(0, 2), (20, 1), (40, 0)] {
        obs = restart(obs, i, t0() + secs(at), &mut moves);
    }
    assert_eq!(moves.moves, 0);
    assert_eq!(readers(&obs), before);
    assert_eq!(obs.group.status.as_ref().unwrap().shards.held, 0);
}

#[test]
fn without_the_setting_a_rolling_restart_moves_shards_as_before() {
    let mut obs = settled(false);
    let mut moves = MoveCount::default();
    moves.see(&obs);
    pod_mut(&mut obs, "web-2").deletion_timestamp = Some(t0() + secs(30));
    pod_mut(&mut obs, "web-2").containers = Containers::Stopped;
    let (obs, _) = step(obs, t0(), &mut moves);
    let (obs, _) = step(obs, t0() + secs(1), &mut moves);
    assert_eq!(moves.moves, 4, "web-2's four shards went to its peers");
    assert!(states_of(&obs, "web-2").is_empty());
}

#[test]
fn a_container_restart_in_the_same_pod_moves_nothing() {
    let mut obs = settled(true);
    let mut moves = MoveCount::default();
    moves.see(&obs);
    let pod = pod_mut(&mut obs, "web-1");
    pod.ready = false;
    pod.ready_since = Some(t0());
    let (mut obs, decision) = step(obs, t0(), &mut moves);
    assert!(
        states_of(&obs, "web-1")
            .iter()
            .all(|s| *s == ShardPhase::Revoking)
    );
    let status = decision.status.clone().into_status();
    assert_eq!(status.shards.held, 4);
    assert_eq!(status.held_until, Some(t0() + secs(120)));
    assert!(
        decision.requeue_after <= Duration::from_secs(120),
        "the hold's end is a deadline the reconcile looks at"
    );
    // Ready again (the kubelet restarted the container in the same pod):
    // the revoke is called off, no evidence needed: it is the same pod.
    let pod = pod_mut(&mut obs, "web-1");
    pod.ready = true;
    pod.ready_since = Some(t0() + secs(5));
    let (obs, _) = step(obs, t0() + secs(5), &mut moves);
    assert!(
        states_of(&obs, "web-1")
            .iter()
            .all(|s| *s == ShardPhase::Active)
    );
    assert_eq!(moves.moves, 0);
}

#[test]
fn a_scaled_down_ordinal_and_a_deployments_pod_move_at_once() {
    for (sets, generated) in [
        (BTreeMap::from([("web".to_owned(), 2)]), false),
        (BTreeMap::new(), true),
    ] {
        let mut obs = settled(true);
        obs.stateful_sets = sets;
        let mut moves = MoveCount::default();
        moves.see(&obs);
        let pod = pod_mut(&mut obs, "web-2");
        pod.generated_name = generated;
        if generated {
            pod.stateful_set = None;
        }
        pod.deletion_timestamp = Some(t0() + secs(30));
        pod.containers = Containers::Stopped;
        let (obs, _) = step(obs, t0(), &mut moves);
        assert!(
            doc(&obs).shards.values().all(|r| r.return_hold.is_none()),
            "nothing is held for a pod that will not return"
        );
        let (obs, _) = step(obs, t0() + secs(1), &mut moves);
        assert_eq!(moves.moves, 4);
        assert!(states_of(&obs, "web-2").is_empty());
    }
}

#[test]
fn a_pod_that_does_not_return_loses_its_shards_when_the_window_ends() {
    let mut obs = settled(true);
    let mut moves = MoveCount::default();
    moves.see(&obs);
    let pod = pod_mut(&mut obs, "web-0");
    pod.ready = false;
    pod.ready_since = Some(t0());
    pod.containers = Containers::Running;
    let (obs, _) = step(obs, t0(), &mut moves);
    // The drain timeout (30 s from when its annotation was seen listing
    // the revoke) completes the revoke: held, unread.
    let (obs, _) = step(obs, t0() + secs(1), &mut moves);
    let (obs, _) = step(obs, t0() + secs(31), &mut moves);
    assert!(
        states_of(&obs, "web-0")
            .iter()
            .all(|s| *s == ShardPhase::Held)
    );
    let (obs, _) = step(obs, t0() + secs(119), &mut moves);
    assert!(
        states_of(&obs, "web-0")
            .iter()
            .all(|s| *s == ShardPhase::Held)
    );
    assert_eq!(moves.moves, 0);
    let (obs, decision) = step(obs, t0() + secs(120), &mut moves);
    assert!(states_of(&obs, "web-0").is_empty(), "the window ended");
    assert_eq!(moves.moves, 4);
    let expired: Vec<_> = decision
        .events
        .iter()
        .filter(|e| e.reason == crate::conditions::reason::HOLD_EXPIRED)
        .collect();
    assert_eq!(expired.len(), 1, "{:?}", decision.events);
    assert!(expired[0].message.contains("4 shards held for pod web-0"));
    assert!(
        expired[0].message.contains("returnWithin (2m)"),
        "{}",
        expired[0].message
    );
    assert_eq!(
        decision.holds_ended.iter().filter(|e| !e.returned).count(),
        4
    );
}

#[test]
fn another_pod_of_the_name_back_before_evidence_waits_for_it() {
    let mut obs = settled(true);
    let mut moves = MoveCount::default();
    moves.see(&obs);
    let pod = pod_mut(&mut obs, "web-2");
    pod.deletion_timestamp = Some(t0() + secs(30));
    pod.deletion_grace_seconds = Some(30);
    let (mut obs, _) = step(obs, t0(), &mut moves);
    // Force-deleted (still running, as far as anyone knows) and recreated
    // at once; the memory of departed pods was lost (an operator restart).
    obs.pods.retain(|p| p.name != "web-2");
    obs.departed = Departures::default();
    obs.pods.push(member(2, "uid-2-new"));
    obs.pods.sort_by(|a, b| a.name.cmp(&b.name));
    let (obs, _) = step(obs, t0() + secs(2), &mut moves);
    assert!(
        states_of(&obs, "web-2")
            .iter()
            .all(|s| *s == ShardPhase::Revoking),
        "not active on the new pod while the old one may still read"
    );
    // The drain timeout (from when the new pod's annotation was seen
    // listing the revoke) releases it (no lease table): active on the pod
    // of the name, which is where it was: no move.
    let (obs, _) = step(obs, t0() + secs(3), &mut moves);
    let (obs, _) = step(obs, t0() + secs(33), &mut moves);
    assert!(
        states_of(&obs, "web-2")
            .iter()
            .all(|s| *s == ShardPhase::Active)
    );
    assert_eq!(moves.moves, 0);
}

#[test]
fn a_restarted_operator_keeps_the_deadline_the_document_records() {
    let mut obs = settled(true);
    let mut moves = MoveCount::default();
    moves.see(&obs);
    let pod = pod_mut(&mut obs, "web-1");
    pod.deletion_timestamp = Some(t0() + secs(30));
    pod.deletion_grace_seconds = Some(30);
    pod.containers = Containers::Stopped;
    let (obs, _) = step(obs, t0(), &mut moves);
    let (mut obs, _) = step(obs, t0() + secs(1), &mut moves);
    assert!(
        states_of(&obs, "web-1")
            .iter()
            .all(|s| *s == ShardPhase::Held)
    );
    // Gone, and the operator restarted: no pod, no memory of its departure.
    obs.pods.retain(|p| p.name != "web-1");
    obs.departed = Departures::default();
    let (obs, decision) = step(obs, t0() + secs(90), &mut moves);
    assert!(
        states_of(&obs, "web-1")
            .iter()
            .all(|s| *s == ShardPhase::Held)
    );
    let status = decision.status.into_status();
    assert_eq!(
        status.held_until,
        Some(t0() + secs(120)),
        "counted from the deletion, not the restart"
    );
    let (obs, _) = step(obs, t0() + secs(121), &mut moves);
    assert!(states_of(&obs, "web-1").is_empty());
    assert_eq!(moves.moves, 4);
}

/// Plans every group of one pool in turn at `now`, each with its row of the
/// pool's deal, the waited-for pods dealt to as present over every group's
/// document (as the operator's pool book does), and with its plan memory.
fn plan_pool(
    book: &mut crate::pool::PoolBook,
    groups: &mut [Observation],
    now: Timestamp,
    moves: &mut [MoveCount],
    memories: &mut [PlanMemory],
) {
    use crate::pool::{Peer, PoolPods};
    for i in 0..groups.len() {
        let docs: Vec<AssignmentDocument> = groups
            .iter()
            .filter_map(|o| o.published.document().cloned())
            .collect();
        let refs: Vec<&AssignmentDocument> = docs.iter().collect();
        let peers: Vec<Peer> = groups.iter().map(Peer::of).collect();
        let obs = &groups[i];
        let pool = obs.pool.clone().expect("a pool");
        let returning = identities(
            &pool,
            &obs.pods,
            &obs.stateful_sets,
            &obs.departed,
            &refs,
            now,
        )
        .returning;
        let pools = [PoolPods {
            pool: &pool,
            pods: &obs.pods,
            returning: &returning,
        }];
        let shared = book.share(&obs.group.qualified_name(), &pools, peers, now);
        let mut planned = obs.clone();
        planned.pool_share = shared.share;
        groups[i] = step_with(planned, now, &mut moves[i], Some(&mut memories[i])).0;
    }
}

/// Every pod's active shards over all `groups`.
fn pool_totals(groups: &[Observation]) -> BTreeMap<String, usize> {
    let mut totals = BTreeMap::new();
    for obs in groups {
        for reader in readers(obs).into_values() {
            *totals.entry(reader).or_insert(0) += 1;
        }
    }
    totals
}

#[test]
fn a_pool_of_several_groups_keeps_its_deal_while_a_pod_restarts_under_its_name() {
    // 2 + 1 shards on 3 pods: the pool's deal gives each pod 1 in all, so
    // web-2's shard is a ⌈⌉ quota of its group that the deal must keep
    // for it while it is away.
    let before = restart_in_a_pool(&[2, 1]);
    assert!(
        before.len() == 3 && before.values().all(|&n| n == 1),
        "{before:?}"
    );
}

/// The same with groups of 2,000 shards or more, whose memories prepare
/// each document published for the next plan (the copy the next document
/// patches): every decision is the plan's without memory.
#[test]
fn a_pool_of_large_groups_plans_a_restart_under_its_name_as_without_memory() {
    let before = restart_in_a_pool(&[2_401, 2_000]);
    let (fewest, most) = (before.values().min(), before.values().max());
    assert!(
        before.len() == 3
            && most
                .zip(fewest)
                .is_some_and(|(most, fewest)| most - fewest <= 1),
        "{before:?}"
    );
}

/// A pool of two groups (`orders`, `events`) of `shards` shards each on StatefulSet `web`'s three
/// pods, settled, then `web-2` restarted under its name (terminating,
/// stopped, gone, back, Ready), each group planned with its memory: no
/// shard of any group moves, the pool's totals stay, and every shard is
/// active at the end. The totals before the restart.
fn restart_in_a_pool(shards: &[u32]) -> BTreeMap<String, usize> {
    let mut groups: Vec<Observation> = shards
        .iter()
        .enumerate()
        .map(|(g, &count)| observation(["orders", "events"][g], count, true))
        .collect();
    let mut book = crate::pool::PoolBook::default();
    let mut moves: Vec<MoveCount> = groups.iter().map(|_| MoveCount::default()).collect();
    let mut memories: Vec<PlanMemory> = groups.iter().map(|_| PlanMemory::default()).collect();
    for round in 0..3 {
        plan_pool(
            &mut book,
            &mut groups,
            t0() - secs(3_600 - round),
            &mut moves,
            &mut memories,
        );
    }
    let before = pool_totals(&groups);
    let mut pods = groups[0].pods.clone();
    let at = |groups: &mut Vec<Observation>, pods: &[PodInfo], departed: Option<Departure>| {
        for obs in groups.iter_mut() {
            obs.pods = pods.to_vec();
            if let Some(d) = &departed {
                obs.departed.pods.insert("web-2".into(), vec![d.clone()]);
            }
        }
    };
    // web-2 terminating, then stopped by the kubelet.
    pods[2].deletion_timestamp = Some(t0() + secs(30));
    pods[2].deletion_grace_seconds = Some(30);
    at(&mut groups, &pods, None);
    plan_pool(&mut book, &mut groups, t0(), &mut moves, &mut memories);
    pods[2].containers = Containers::Stopped;
    at(&mut groups, &pods, None);
    plan_pool(
        &mut book,
        &mut groups,
        t0() + secs(2),
        &mut moves,
        &mut memories,
    );
    // Gone, then created again under its name, then Ready.
    let gone = pods.remove(2);
    let departure = Departure {
        uid: gone.uid.clone(),
        at: t0() + secs(3),
        containers: Containers::Stopped,
        scheduled: true,
        created: gone.created,
        generated_name: false,
    };
    at(&mut groups, &pods, Some(departure));
    plan_pool(
        &mut book,
        &mut groups,
        t0() + secs(3),
        &mut moves,
        &mut memories,
    );
    let mut back = member(2, "uid-2-back");
    back.ready = false;
    back.ready_since = Some(t0() + secs(4));
    pods.push(back);
    at(&mut groups, &pods, None);
    plan_pool(
        &mut book,
        &mut groups,
        t0() + secs(4),
        &mut moves,
        &mut memories,
    );
    pods[2].ready = true;
    pods[2].ready_since = Some(t0() + secs(9));
    at(&mut groups, &pods, None);
    for later in [9, 10] {
        plan_pool(
            &mut book,
            &mut groups,
            t0() + secs(later),
            &mut moves,
            &mut memories,
        );
    }
    let moved: usize = moves.iter().map(|m| m.moves).sum();
    assert_eq!(moved, 0, "no shard of either group moved");
    assert_eq!(
        pool_totals(&groups),
        before,
        "the pool's totals are as before"
    );
    for obs in &groups {
        assert!(
            doc(obs)
                .shards
                .values()
                .all(|r| r.state == ShardPhase::Active)
        );
    }
    before
}

#[test]
fn stateful_set_ordinals_are_read_from_the_longest_matching_name() {
    let sets = BTreeMap::from([("web".to_owned(), 3), ("web-1".to_owned(), 1)]);
    assert_eq!(stateful_set_of("web-1-0", None, &sets), Some(("web-1", 0)));
    assert_eq!(stateful_set_of("web-2", None, &sets), Some(("web", 2)));
    assert_eq!(stateful_set_of("web-x", None, &sets), None);
    assert_eq!(
        stateful_set_of("web-2", Some("web"), &sets),
        Some(("web", 2))
    );
    assert_eq!(stateful_set_of("other-2", None, &sets), None);
}
