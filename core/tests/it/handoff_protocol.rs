//! The two-phase handoff in the pure plan step: what counts as evidence that
//! a revoked owner let go (and what never does), graceful termination,
//! restart safety and move pacing.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use shardring_core::handoff::Evidence;
use shardring_core::leases::{LeaseSnapshot, LeaseTable};
use shardring_core::observation::LeaseObservation;
use shardring_core::observation::{Observation, Published};
use shardring_core::plan::{Moves, plan};
use shardring_crds::ShardPhase;
use shardring_crds::shard_group::LeaseTableSpec;

use shardring_core::fixtures::*;

fn later(mut obs: Observation, secs: i64) -> Observation {
    obs.now += SignedDuration::from_secs(secs);
    obs
}

/// A settled group of 8 shards on 4 pods, with a lease table whose leases
/// are held by the owners, renewed at `now`.
fn with_leases() -> Observation {
    let mut obs = observation(8, pods(4));
    obs.group.spec.lease_table = Some(LeaseTableSpec {
        table_name: "orders-app".into(),
        region: None,
        endpoint: None,
    });
    let obs = settle(obs);
    let mut obs = obs;
    obs.leases = LeaseObservation::Read(leases_of(&obs, obs.now));
    obs
}

fn leases_of(obs: &Observation, renewed: Timestamp) -> LeaseTable {
    let doc = document(obs);
    let leases: BTreeMap<String, LeaseSnapshot> = doc
        .shards
        .iter()
        .map(|(id, r)| {
            let lease = LeaseSnapshot {
                shard_id: id.clone(),
                owner: r.owner.clone(),
                counter: 7,
                counter_changed_at: renewed,
                checkpoint: None,
                sequence_number: None,
                complete: false,
                parents: Vec::new(),
                children: Vec::new(),
                checkpoint_owner: None,
                throughput_kbps: None,
            };
            (id.clone(), lease)
        })
        .collect();
    LeaseTable {
        leases,
        scanned_at: Some(obs.now),
        items: doc.shards.len(),
    }
}

fn table(obs: &mut Observation) -> &mut LeaseTable {
    match &mut obs.leases {
        LeaseObservation::Read(t) => t,
        other => panic!("no lease table: {other:?}"),
    }
}

fn shards_of<'a>(obs: &'a Observation, pod: &str) -> Vec<&'a String> {
    document(obs)
        .pods
        .get(pod)
        .map_or(Vec::new(), |p| p.active.iter().collect())
}

fn revoking(obs: &Observation) -> Vec<(String, String)> {
    document(obs)
        .shards
        .iter()
        .filter(|(_, r)| r.state == ShardPhase::Revoking)
        .map(|(id, r)| (id.clone(), r.owner.clone().unwrap()))
        .collect()
}

/// No shard is ever active on two pods, and a revoking shard is active nowhere.
fn assert_single_owner(obs: &Observation) {
    let doc = document(obs);
    let mut seen = BTreeMap::new();
    for (pod, entry) in &doc.pods {
        for shard in entry.active.iter().chain(&entry.revoking) {
            if let Some(other) = seen.insert(shard.clone(), pod.clone()) {
                panic!("{shard} on {other} and {pod}");
            }
        }
    }
}

#[test]
fn a_released_lease_completes_the_handoff() {
    let mut obs = with_leases();
    obs.pods[3].deletion_timestamp = Some(obs.now);
    obs.pods[3].deletion_grace_seconds = Some(30);
    let mut obs = settle(obs);
    let moving = revoking(&obs);
    assert_eq!(
        moving.len(),
        2,
        "both shards of the terminating pod at once"
    );
    assert_single_owner(&obs);
    // The owner still holds the leases: nothing moves, however long it takes
    // (the pod is still there, so no drain timeout either until the lease expires).
    obs = settle(later(obs, 5));
    *table(&mut obs) = leases_of(&obs, obs.now);
    obs = settle(obs);
    assert_eq!(revoking(&obs).len(), 2);
    // It checkpoints and releases one of them.
    let mut obs = later(obs, 1);
    let now = obs.now;
    let t = table(&mut obs);
    t.scanned_at = Some(now);
    t.leases.get_mut(&moving[0].0).unwrap().owner = None;
    let d = plan(&obs);
    assert_eq!(d.handoffs.len(), 1);
    assert_eq!(d.handoffs[0].evidence, Evidence::LeaseReleased);
    assert_eq!(d.handoffs[0].duration, std::time::Duration::from_secs(6));
    let obs = settle(obs);
    assert_eq!(revoking(&obs), vec![moving[1].clone()]);
    assert_single_owner(&obs);
}

#[test]
fn a_failed_or_old_lease_read_is_not_evidence() {
    let mut obs = with_leases();
    obs.pods.remove(3); // gone without a graceful deletion being seen
    let obs = settle(obs);
    assert_eq!(revoking(&obs).len(), 2);
    // An hour later the lease read fails: no lease evidence, the pod was
    // never seen terminating gracefully: the shards stay revoking.
    let mut failed = later(obs.clone(), 3600);
    failed.leases = LeaseObservation::Failed("throttled".into());
    let d = plan(&failed);
    assert!(d.handoffs.is_empty());
    assert_eq!(d.document_write, None);
    // A scan from before the revoke (a stale cache) showing no owner is not
    // evidence either.
    let mut stale = later(obs, 3600);
    let t = table(&mut stale);
    t.leases.values_mut().for_each(|l| l.owner = None);
    t.scanned_at = Some(now() - SignedDuration::from_secs(1));
    assert!(plan(&stale).handoffs.is_empty());
}

#[test]
fn a_force_deleted_pod_waits_for_its_lease_to_expire() {
    let mut obs = with_leases();
    obs.pods[3].deletion_timestamp = Some(obs.now);
    obs.pods[3].deletion_grace_seconds = Some(0);
    let obs = settle(obs);
    assert_eq!(revoking(&obs).len(), 2);
    assert!(document(&obs).epoch >= 2);
    // The revoke records the owner's lease counter the scan showed.
    for record in document(&obs)
        .shards
        .values()
        .filter(|r| r.handoff.is_some())
    {
        assert_eq!(record.handoff.as_ref().unwrap().lease_counter, Some(7));
    }
    let mut gone = later(obs, 1);
    gone.pods.remove(3);
    // Pod gone, but it was force-deleted: it may still run. Its lease was
    // renewed at t0 and the drain timeout (60 s) has not passed.
    let now1 = gone.now;
    table(&mut gone).scanned_at = Some(now1);
    let d = plan(&gone);
    assert!(d.handoffs.is_empty(), "{:?}", d.handoffs);
    // 61 s after the revoke, with the counter unchanged since t0: expired.
    let mut expired = later(gone, 60);
    let now2 = expired.now;
    table(&mut expired).scanned_at = Some(now2);
    let d = plan(&expired);
    assert_eq!(d.handoffs.len(), 2);
    assert!(
        d.handoffs
            .iter()
            .all(|h| h.evidence == Evidence::LeaseExpired)
    );
    // A lease renewed 5 s ago (its counter moved on) is not expired,
    // whatever the drain timeout says.
    let mut renewed = expired.clone();
    let fresh = renewed.now - SignedDuration::from_secs(5);
    table(&mut renewed).leases.values_mut().for_each(|l| {
        l.counter = 8;
        l.counter_changed_at = fresh;
    });
    assert!(plan(&renewed).handoffs.is_empty());
    // An operator restarted since first scans the table now: the counter
    // is still the one the revoke recorded, so it has not moved since the
    // revoke, and the lease expired as it would have for the operator
    // that published the revoke.
    let mut restarted = expired.clone();
    let first_scan = restarted.now;
    table(&mut restarted)
        .leases
        .values_mut()
        .for_each(|l| l.counter_changed_at = first_scan);
    let d = plan(&restarted);
    assert_eq!(d.handoffs.len(), 2, "{:?}", d.handoffs);
    assert!(
        d.handoffs
            .iter()
            .all(|h| h.evidence == Evidence::LeaseExpired)
    );
    // Renewed after the revoke, then silent: the restarted operator counts
    // the failover from its first scan (it cannot know when the counter
    // last moved).
    table(&mut restarted)
        .leases
        .values_mut()
        .for_each(|l| l.counter = 9);
    assert!(plan(&restarted).handoffs.is_empty());
}

#[test]
fn without_a_lease_table_the_drain_clock_starts_when_the_pod_saw_the_revoke() {
    let mut obs = settle(observation(8, pods(4)));
    obs.pods[0].ready = false;
    let obs = settle(obs);
    let moving = revoking(&obs);
    assert_eq!(moving.len(), 2);
    let d = plan(&obs);
    assert_eq!(
        conditions(&d.status, "Progressing"),
        ("True", "HandoffUnfenced")
    );
    // The pod's annotation lost the revoke (a failed write): no clock.
    let mut lost = later(obs.clone(), 120);
    lost.pods[0].annotation = None;
    assert!(plan(&lost).handoffs.is_empty());
    // Delivered: the clock starts at the next plan and runs 60 s.
    let obs = settle(later(obs, 120));
    assert!(document(&obs).shards[&moving[0].0].state == ShardPhase::Revoking);
    let d = plan(&later(obs.clone(), 59));
    assert!(d.handoffs.is_empty());
    let d = plan(&later(obs, 60));
    assert_eq!(d.handoffs.len(), 2);
    assert!(
        d.handoffs
            .iter()
            .all(|h| h.evidence == Evidence::DrainTimeout)
    );
}

fn conditions<'a>(s: &'a shardring_crds::ShardGroupStatus, t: &str) -> (&'a str, &'a str) {
    let c = s.conditions.iter().find(|c| c.type_ == t).unwrap();
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn a_restarted_operator_resumes_moves_without_extra_ones() {
    let mut obs = with_leases();
    obs.pods[3].deletion_timestamp = Some(obs.now);
    obs.pods[3].deletion_grace_seconds = Some(30);
    let obs = settle(obs);
    let before = document(&obs).clone();
    // A new operator: same document and status, nothing in memory, a lease
    // table it has not read yet. It publishes nothing new.
    let mut restarted = later(obs, 3);
    restarted.leases = LeaseObservation::Failed("not read yet".into());
    let d = plan(&restarted);
    assert_eq!(d.document_write, None);
    assert_eq!(d.moves, Moves::default());
    // The pod is gone after its graceful deletion (remembered in status).
    let mut gone = restarted;
    gone.pods.remove(3);
    let d = plan(&gone);
    assert_eq!(d.handoffs.len(), 2);
    assert!(d.handoffs.iter().all(|h| h.evidence == Evidence::PodGone));
    let doc = d.document_write.unwrap().document;
    assert!(doc.epoch > before.epoch);
    assert_eq!(
        d.moves,
        Moves::default(),
        "the moves were decided before the restart"
    );
}

#[test]
fn a_lost_configmap_is_rebuilt_from_the_pods_annotations() {
    let obs = settle(observation(8, pods(4)));
    let mut lost = obs;
    lost.published = Published::Missing;
    lost.pods.push(pod_info("consumer-9"));
    lost.group.spec.rebalance.delay = "0s".into();
    let d = plan(&lost);
    let doc = d.document_write.unwrap().document;
    // Every shard stays on the pod whose annotation lists it, or is revoked
    // from it: none is handed to the new pod directly.
    assert!(!doc.pods.contains_key("consumer-9"));
    for pod in ["consumer-0", "consumer-1", "consumer-2", "consumer-3"] {
        let entry = &doc.pods[pod];
        assert_eq!(entry.active.len() + entry.revoking.len(), 2);
    }
}

#[test]
fn optional_moves_wait_for_the_delay_and_the_budget() {
    let mut obs = settle(observation(12, pods(3)));
    obs.group.spec.rebalance.max_moves_per_window = Some(2);
    obs.group.spec.rebalance.window = "10m".into();
    obs.pods.push(pod_info("consumer-3"));
    let obs = settle(obs);
    assert!(
        revoking(&obs).is_empty(),
        "the delay holds optional moves back"
    );
    // The delay's wait is expected after a pod change: not the budget's.
    assert_eq!(balanced(&obs).1, "Balanced");
    let status = obs.group.status.clone().unwrap();
    assert_eq!(
        status.last_pod_change.map(|t| t.to_string()).as_deref(),
        Some("2026-11-21T12:00:00Z")
    );
    // After the delay, at most two moves in the window.
    let obs = settle(later(obs, 30));
    assert_eq!(revoking(&obs).len(), 2);
    // Three moves bring consumer-3 to its share; the budget allowed two.
    let (status, reason, message) = balanced(&obs);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "MovesDeferred")
    );
    assert!(
        message.starts_with("1 optional moves wait for the move budget (rebalance.maxMovesPerWindow: 2 per window 10m)"),
        "{message}"
    );
    assert_eq!(
        obs.group.status.as_ref().unwrap().move_budget_remaining,
        Some(0)
    );
    assert_eq!(obs.group.status.as_ref().unwrap().move_log.len(), 1);
    // Finish the two handoffs (drain timeout, no lease table), then the
    // budget is spent until the window slides.
    let obs = settle(settle(later(obs, 1)));
    let obs = settle(later(obs, 61));
    assert!(revoking(&obs).is_empty());
    assert_eq!(shards_of(&obs, "consumer-3").len(), 2);
    let obs = settle(later(obs, 60));
    assert!(revoking(&obs).is_empty(), "budget spent");
    assert_eq!(balanced(&obs).1, "MovesDeferred", "still waiting");
    let obs = settle(later(obs, 600));
    assert_eq!(revoking(&obs).len(), 1, "the last optional move");
    assert_eq!(balanced(&obs).1, "Balanced", "nothing left to defer");
    assert_single_owner(&obs);
}

/// The group's `Balanced` condition: status, reason, message.
fn balanced(obs: &Observation) -> (String, String, String) {
    let status = obs.group.status.as_ref().expect("a status");
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Balanced")
        .expect("a Balanced condition");
    (
        condition.status.clone(),
        condition.reason.clone(),
        condition.message.clone(),
    )
}

#[test]
fn required_moves_are_never_held_back() {
    let mut obs = settle(observation(12, pods(3)));
    obs.group.spec.rebalance.max_moves_per_window = Some(1);
    obs.group.spec.rebalance.delay = "10m".into();
    obs.pods[0].deletion_timestamp = Some(obs.now);
    obs.pods[0].deletion_grace_seconds = Some(30);
    let d = plan(&obs);
    assert_eq!(d.moves.required, 4);
    let obs = settle(obs);
    assert_eq!(revoking(&obs).len(), 4);
    assert_eq!(
        obs.group.status.as_ref().unwrap().move_budget_remaining,
        Some(0)
    );
}

#[test]
fn completed_handoffs_are_kept_in_the_status_newest_first() {
    let handed_over = |shards: u32| {
        let mut obs = settle(observation(shards, pods(3)));
        obs.group.spec.rebalance.delay = "0s".into();
        obs.pods.push(pod_info("consumer-3"));
        let mut obs = settle(obs);
        // The drain timeout ends the handoffs (no lease table).
        for _ in 0..20 {
            if revoking(&obs).is_empty() {
                break;
            }
            obs = settle(later(obs, 30));
        }
        assert!(revoking(&obs).is_empty());
        obs.group.status.unwrap().recent_handoffs
    };
    // 12 shards: consumer-3 takes one from each of the other three.
    let recent = handed_over(12);
    assert_eq!(recent.len(), 3, "{recent:?}");
    for handoff in &recent {
        assert_eq!(handoff.to.as_deref(), Some("consumer-3"));
        assert_eq!(handoff.evidence, "drain_timeout");
        assert!(handoff.millis >= 30_000, "{handoff:?}");
    }
    // 400 shards: 100 handoffs, of which the status keeps the last 16.
    assert_eq!(handed_over(400).len(), 16);
}
