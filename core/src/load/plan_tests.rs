//! `balance: throughput` through the real plan step: skewed measured loads
//! move shards once (a `LoadRebalanced` Event, `lastRebalance`), the
//! damping interval holds the next rebalance, refused readings show as a
//! condition and an Event and move nothing, a count-mode group's status is
//! as before, and `spec.scaling` gives `recommendedReplicas`.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::{Estimate, LoadObservation, Rejection, Tally};
use crate::conditions::{self, BALANCED, LOAD_MEASURED, reason};
use crate::crds::fixtures;
use crate::crds::shard_group::{BalanceMode, ScalingSpec, ThroughputSpec};
use crate::departures::Departures;
use crate::observation::TopologyObservation;
use crate::observation::{Containers, LeaseObservation, Observation, PodInfo, Published};
use crate::plan::{Decision, Moves, plan};
use crate::topology::Topology;

fn t0() -> Timestamp {
    "2026-11-21T12:00:00Z".parse().unwrap()
}

fn secs(s: i64) -> SignedDuration {
    SignedDuration::from_secs(s)
}

fn pod(name: &str) -> PodInfo {
    PodInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        selected: true,
        ready: true,
        ready_since: Some(t0() - secs(3_600)),
        containers: Containers::Running,
        generated_name: true,
        ..Default::default()
    }
}

/// 8 static shards on pods a and b, throughput mode, no rebalance delay,
/// settled an hour before t0 (nothing measured yet: counts balance).
fn settled(balance: BalanceMode) -> Observation {
    let mut group = fixtures::static_group("prod", "orders", "consumers", 8, "orders-{index}");
    group.spec.balance = balance;
    group.spec.rebalance = fixtures::rebalance("0s");
    if balance.weighs_load() {
        group.spec.throughput = Some(ThroughputSpec::default());
    }
    let topology = Topology::of_partitions(group.spec.source.named_partitions().unwrap());
    let obs = Observation {
        group,
        pool: Some(fixtures::pool("prod", "consumers", &[], 0)),
        pods: vec![pod("a"), pod("b")],
        topology: TopologyObservation {
            source: "static:8".into(),
            last_good: Some(std::sync::Arc::new(topology)),
            read_at: Some(t0() - secs(3_600)),
            ..Default::default()
        },
        published: Published::Missing,
        leases: LeaseObservation::NotConfigured,
        departed: Departures::default(),
        releases: Default::default(),
        loads: LoadObservation::default(),
        now: t0() - secs(3_600),
        pool_share: Default::default(),
        stateful_sets: Default::default(),
    };
    settle(obs).0
}

/// Applies a decision as the cycle would (document, annotations, status).
fn settle(mut obs: Observation) -> (Observation, Decision) {
    let decision = plan(&obs);
    if let Some(doc) = decision.document_write.clone().map(|w| w.document) {
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

/// Estimates read at `now` for every shard: `hot` weighs `heavy`, the
/// others 100 bytes/s, each from a few readings.
fn loads(now: Timestamp, hot: &[&str], heavy: f64) -> LoadObservation {
    let estimates = (0..8)
        .map(|i| {
            let id = format!("orders-{i}");
            let rate = if hot.contains(&id.as_str()) {
                heavy
            } else {
                100.0
            };
            let mut e = Estimate::first(rate, 1.0, now - secs(20));
            e.update(rate, 1.0, now - secs(10), Duration::from_secs(30));
            e.update(rate, 1.0, now, Duration::from_secs(30));
            (id, e)
        })
        .collect();
    LoadObservation {
        estimates,
        rejected: Tally::default(),
    }
}

fn owner_of(obs: &Observation, shard: &str) -> String {
    obs.published.document().unwrap().shards[shard]
        .owner
        .clone()
        .unwrap()
}

fn condition<'a>(
    decision: &'a Decision,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    conditions::find(&decision.status.conditions, type_).expect(type_)
}

#[test]
fn skewed_loads_move_shards_once_and_damping_holds_the_next_rebalance() {
    let mut obs = settled(BalanceMode::Throughput);
    // Two of a's shards turn hot: a carries far more than b.
    let a_shards: Vec<String> = (0..8)
        .map(|i| format!("orders-{i}"))
        .filter(|s| owner_of(&obs, s) == "a")
        .collect();
    let hot: Vec<&str> = a_shards.iter().take(2).map(String::as_str).collect();
    obs.now = t0();
    obs.loads = loads(obs.now, &hot, 1000.0);
    // First seen outside the band: nothing moves until it has stayed
    // outside for three half-lives (90 s), and the plan looks again then.
    let (mut obs, seen) = settle(obs);
    assert_eq!(seen.moves, Moves::default());
    let status = seen.status.throughput.as_ref().unwrap();
    assert_eq!(status.out_of_band_since, Some(t0()));
    assert!(seen.requeue_after <= Duration::from_secs(90));
    obs.now = t0() + secs(60);
    obs.loads = loads(obs.now, &hot, 1000.0);
    let (mut obs, still) = settle(obs);
    assert_eq!(still.moves, Moves::default(), "not confirmed yet");
    let rebalanced_at = t0() + secs(90);
    obs.now = rebalanced_at;
    obs.loads = loads(obs.now, &hot, 1000.0);
    let (mut obs, decision) = settle(obs);
    assert_eq!(decision.moves.required, 0);
    assert!(decision.moves.optional > 0, "optional moves for load");
    let status = decision
        .status
        .throughput
        .as_ref()
        .expect("throughput status");
    assert_eq!(status.last_rebalance, Some(rebalanced_at));
    assert_eq!(status.out_of_band_since, None);
    assert_eq!(status.measured_shards, 8);
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.reason == reason::LOAD_REBALANCED)
    );
    assert_eq!(condition(&decision, LOAD_MEASURED).status, "True");
    // The two hot shards end on different pods.
    let hot_owners: Vec<String> = hot
        .iter()
        .map(|s| {
            let r = &obs.published.document().unwrap().shards[*s];
            r.handoff
                .as_ref()
                .and_then(|h| h.to.clone())
                .or_else(|| r.owner.clone())
                .unwrap()
        })
        .collect();
    assert_ne!(hot_owners[0], hot_owners[1], "{hot_owners:?}");

    // A minute later two more shards turn hot (four of 1000 bytes/s and
    // four of 100: two of each per pod is exact): within the damping interval
    // (5m) nothing moves for load, Balanced says why, and the plan looks
    // again when the interval ends.
    obs.now = rebalanced_at + secs(60);
    let cold_b: Vec<String> = (0..8)
        .map(|i| format!("orders-{i}"))
        .filter(|s| !hot.contains(&s.as_str()))
        .take(2)
        .collect();
    let refs: Vec<&str> = cold_b
        .iter()
        .map(String::as_str)
        .chain(hot.iter().copied())
        .collect();
    obs.loads = loads(obs.now, &refs, 1000.0);
    let (obs, held) = settle(obs);
    assert_eq!(held.moves, Moves::default(), "damped");
    assert!(held.status.throughput.as_ref().unwrap().out_of_band_pods > 0);
    let balanced = condition(&held, BALANCED);
    assert_eq!(
        (balanced.status.as_str(), balanced.reason.as_str()),
        ("False", reason::OUT_OF_BAND)
    );
    assert!(
        held.requeue_after <= Duration::from_secs(240),
        "{:?}",
        held.requeue_after
    );
    assert_eq!(
        held.status.throughput.as_ref().unwrap().last_rebalance,
        Some(rebalanced_at)
    );

    // Once the interval passed, the next rebalance may move.
    let mut later = obs;
    later.now = rebalanced_at + secs(301);
    later.loads = loads(later.now, &refs, 1000.0);
    let (_, free) = settle(later);
    let out = free.status.throughput.as_ref().unwrap();
    assert_eq!(out.out_of_band_pods, 0, "{out:?}");
    assert!(free.moves.optional > 0);
    assert_eq!(out.last_rebalance, Some(rebalanced_at + secs(301)));
}

#[test]
fn refused_readings_show_as_a_condition_and_an_event_and_move_nothing() {
    let mut obs = settled(BalanceMode::Throughput);
    obs.now = t0();
    obs.loads = loads(obs.now, &[], 100.0);
    let (mut obs, _) = settle(obs);
    obs.now = t0() + secs(10);
    let rejected = Tally {
        total: 2,
        by_reason: BTreeMap::from([("AbsurdLoad", 1), ("InvalidLoad", 1)]),
        last: Some((
            Rejection::AbsurdLoad {
                shard: "orders-1".into(),
                value: 1e12,
                max: 1e8,
            },
            t0() + secs(5),
        )),
    };
    obs.loads = LoadObservation {
        rejected,
        ..loads(obs.now, &[], 100.0)
    };
    let (obs, decision) = settle(obs);
    assert_eq!(decision.moves, Moves::default());
    let measured = condition(&decision, LOAD_MEASURED);
    assert_eq!(
        (measured.status.as_str(), measured.reason.as_str()),
        ("False", reason::LOAD_REPORTS_REJECTED)
    );
    assert!(
        measured.message.contains("AbsurdLoad: 1"),
        "{}",
        measured.message
    );
    let event = decision
        .events
        .iter()
        .find(|e| e.reason == reason::LOAD_REPORT_REJECTED)
        .expect("a Warning Event");
    assert!(
        event.message.starts_with("2 load readings refused"),
        "{}",
        event.message
    );
    // The same tally again: no new Event.
    let mut again = obs;
    again.now = t0() + secs(20);
    let decision = plan(&again);
    assert!(
        !decision
            .events
            .iter()
            .any(|e| e.reason == reason::LOAD_REPORT_REJECTED)
    );
    // staleAfter (2m) after the refusal the condition clears.
    again.now = t0() + secs(130);
    again.loads = LoadObservation {
        rejected: again.loads.rejected.clone(),
        ..loads(again.now, &[], 100.0)
    };
    let decision = plan(&again);
    assert_eq!(condition(&decision, LOAD_MEASURED).status, "True");
}

#[test]
fn unmeasured_and_stale_shards_show_in_the_condition() {
    let mut obs = settled(BalanceMode::Throughput);
    obs.now = t0();
    let mut some = loads(obs.now - secs(300), &[], 100.0);
    some.estimates.remove("orders-0");
    obs.loads = some;
    let decision = plan(&obs);
    let measured = condition(&decision, LOAD_MEASURED);
    assert_eq!(measured.reason, reason::LOAD_UNMEASURED);
    let status = decision.status.into_status().throughput.unwrap();
    assert_eq!(
        (
            status.unmeasured_shards,
            status.stale_shards,
            status.measured_shards
        ),
        (1, 7, 0)
    );
    assert_eq!(
        decision.moves,
        Moves::default(),
        "nothing changed: nothing moves"
    );
}

#[test]
fn a_count_group_reports_no_load_and_scaling_recommends_replicas() {
    let obs = settled(BalanceMode::Count);
    let status = obs.group.status.as_ref().unwrap();
    assert!(status.throughput.is_none());
    assert!(status.recommended_replicas.is_none());
    assert!(conditions::find(&status.conditions, LOAD_MEASURED).is_none());

    let mut scaled = obs;
    scaled.group.spec.scaling = Some(ScalingSpec {
        target_shards_per_pod: Some(3),
        ..ScalingSpec::default()
    });
    let decision = plan(&scaled);
    assert_eq!(decision.status.recommended_replicas, Some(3), "⌈8 / 3⌉");

    let mut by_load = settled(BalanceMode::Throughput);
    by_load.group.spec.scaling = Some(ScalingSpec {
        target_kbps_per_pod: Some(1),
        ..ScalingSpec::default()
    });
    by_load.now = t0();
    by_load.loads = loads(by_load.now, &["orders-0"], 4096.0);
    // 4096 + 7 × 100 bytes/s = 4.68 KB/s: 5 pods of 1 KB/s.
    let decision = plan(&by_load);
    assert_eq!(decision.status.recommended_replicas, Some(5));
    assert_eq!(
        decision.status.into_status().throughput.unwrap().total_kbps,
        5
    );
}

#[test]
fn a_new_pod_takes_its_first_shards_without_waiting_for_confirmation() {
    let mut obs = settled(BalanceMode::Throughput);
    obs.now = t0();
    obs.loads = loads(obs.now, &[], 100.0);
    let (mut obs, quiet) = settle(obs);
    assert_eq!(
        quiet.moves,
        Moves::default(),
        "four shards of 100 bytes/s each"
    );
    // A scale-up: pods c and d hold nothing, a load of exactly 0 and no
    // measurement. With no rebalance delay their shards come in this plan,
    // not three half-lives later.
    obs.pods.push(pod("c"));
    obs.pods.push(pod("d"));
    obs.now = t0() + secs(10);
    obs.loads = loads(obs.now, &[], 100.0);
    let (mut obs, decision) = settle(obs);
    assert_eq!((decision.moves.required, decision.moves.optional), (0, 4));
    let status = decision.status.throughput.as_ref().unwrap();
    assert_eq!(status.last_rebalance, Some(obs.now));
    assert_eq!(status.out_of_band_pods, 0, "{status:?}");
    // An out-of-band state from measurements alone still waits for
    // confirmation (and here for the damping interval too).
    let a_shards: Vec<String> = (0..8)
        .map(|i| format!("orders-{i}"))
        .filter(|s| owner_of(&obs, s) == "a")
        .collect();
    obs.now = t0() + secs(400);
    obs.loads = loads(obs.now, &[a_shards[0].as_str()], 1000.0);
    let (_, seen) = settle(obs);
    assert_eq!(seen.moves, Moves::default());
    assert_eq!(
        seen.status
            .into_status()
            .throughput
            .unwrap()
            .out_of_band_since,
        Some(t0() + secs(400))
    );
}

/// In a pool, a pod may hold none of a throughput group's shards because
/// the pool's other groups fill it: its load is not 0 and it is no new
/// pod. An out-of-band reading then waits for confirmation as any other
/// (found by the simulation's pool seeds: noise moved shards at once,
/// minutes after the last pod change, with nothing confirmed).
#[test]
fn a_pod_the_pools_other_groups_fill_is_no_new_pod() {
    let mut obs = settled(BalanceMode::Throughput);
    obs.now = t0();
    obs.loads = loads(obs.now, &[], 100.0);
    let (mut obs, _) = settle(obs);
    // Pod c joins, filled by the pool's other groups: 400 bytes/s, as much
    // as a and b carry of this group.
    obs.pods.push(pod("c"));
    obs.pool_share.load = BTreeMap::from([(
        "c".to_owned(),
        crate::engine::PodLoad {
            rate: 400,
            noise: 1,
            heaviest: 100,
            shards: vec![100; 4],
        },
    )]);
    obs.now = t0() + secs(10);
    obs.loads = loads(obs.now, &[], 100.0);
    let (mut obs, joined) = settle(obs);
    assert_eq!(joined.moves, Moves::default(), "c has its share already");
    // One of a's shards turns hot: out of the band, not confirmed yet.
    let hot = (0..8)
        .map(|i| format!("orders-{i}"))
        .find(|s| owner_of(&obs, s) == "a")
        .expect("a shard on a");
    obs.now = t0() + secs(400);
    obs.loads = loads(obs.now, &[hot.as_str()], 1000.0);
    let (_, seen) = settle(obs);
    assert_eq!(seen.moves, Moves::default());
    let status = seen.status.into_status().throughput.unwrap();
    assert_eq!(status.out_of_band_since, Some(t0() + secs(400)));
}
