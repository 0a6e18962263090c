//! The cases of evidence `pod_stopped`: what the kubelet's word proves and
//! what it must not be trusted for.

use std::time::Duration;

use super::*;

#[test]
fn terminating_with_every_container_terminated_is_pod_stopped() {
    both(|lease_table| {
        let mut obs = a_revoked(lease_table);
        obs.pods[0].containers = Containers::Stopped;
        let d = plan(&obs);
        assert_eq!(evidence(&d), [Evidence::PodStopped; 2], "{lease_table}");
        assert!(d.handoffs.iter().all(|h| h.to.as_deref() == Some("b")));
        assert_eq!(d.handoffs[0].duration, Duration::from_secs(1));
        // Even while the lease table cannot be read.
        if lease_table {
            obs.leases = LeaseObservation::Failed("throttled".into());
            assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        }
    });
}

#[test]
fn a_pod_that_never_ran_is_pod_stopped() {
    both(|lease_table| {
        // Not bound to a node: no kubelet ever ran anything of it.
        let mut obs = a_revoked(lease_table);
        obs.pods[0].containers = Containers::NeverRan;
        obs.pods[0].node_name = None;
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        // Bound, but created after the revoke: whatever it started saw
        // the revoke.
        obs.pods[0].node_name = Some("node-1".into());
        obs.pods[0].created = Some(t0() + secs(1));
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
    });
}

#[test]
fn a_bound_pod_that_reported_nothing_since_before_the_revoke_is_not() {
    both(|lease_table| {
        // Its kubelet may have started it and not reported it yet.
        let mut obs = a_revoked(lease_table);
        obs.pods[0].containers = Containers::NeverRan;
        assert_eq!(evidence(&plan(&obs)), []);
    });
}

#[test]
fn gone_with_a_stopped_final_state_is_pod_stopped() {
    both(|lease_table| {
        let mut obs = a_revoked(lease_table);
        obs.pods.remove(0);
        obs.departed = remembered(vec![departure(Containers::Stopped)]);
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        // So is one that never ran and was never bound to a node.
        let mut never = departure(Containers::NeverRan);
        never.scheduled = false;
        obs.departed = remembered(vec![never]);
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
    });
}

#[test]
fn gone_after_a_force_deletion_waits_for_the_old_rules() {
    both(|lease_table| {
        // Force-deleted while running (never seen terminating): the
        // final status still says running.
        let mut obs = a_not_ready(lease_table);
        obs.pods.remove(0);
        obs.departed = remembered(vec![departure(Containers::Running)]);
        assert_eq!(evidence(&plan(&obs)), [], "{lease_table}");
        // The old rules still apply: with a lease table the drain
        // timeout and the lease expired; without one the drain timeout,
        // counted from when the pod left (t0 + 1 s): no plan saw the
        // revoke in its annotation, so its process, which the kubelet
        // kills some time after a force deletion, may never have learned
        // of it and reads on meanwhile.
        obs.now = t0() + secs(30);
        if lease_table {
            obs.leases = leases(&obs, lease_table);
            if let LeaseObservation::Read(table) = &mut obs.leases {
                for lease in table.leases.values_mut() {
                    lease.counter_changed_at = t0();
                }
            }
            assert_eq!(evidence(&plan(&obs)), [Evidence::LeaseExpired; 2]);
        } else {
            assert_eq!(evidence(&plan(&obs)), []);
            obs.now = t0() + secs(31);
            assert_eq!(evidence(&plan(&obs)), [Evidence::DrainTimeout; 2]);
        }
    });
}

#[test]
fn a_revoke_seen_delivered_before_a_force_deletion_counts_from_its_delivery() {
    // Without a lease table: the plan at t0 + 1 s sees the revoke (made at
    // t0) in a's annotation (delivered), then a is force-deleted at t0 +
    // 20 s. Its process learned of the revoke when its annotation listed
    // it and stops on its own: the drain counts from that delivery, as
    // for a pod still there (the revoke's publication can be much
    // earlier: annotation writes that failed for a while).
    let mut obs = a_not_ready(false);
    let seen = plan(&obs);
    obs.group.status = Some(seen.status.into_status());
    obs.pods.remove(0);
    let mut gone = departure(Containers::Running);
    gone.at = t0() + secs(20);
    obs.departed = remembered(vec![gone]);
    obs.now = t0() + secs(30);
    assert_eq!(evidence(&plan(&obs)), []);
    obs.now = t0() + secs(31);
    assert_eq!(evidence(&plan(&obs)), [Evidence::DrainTimeout; 2]);
}

#[test]
fn gone_during_a_relist_before_the_revoke_reached_it_drains_from_the_relist() {
    // Without a lease table: a's annotation never listed the revoke (made
    // at t0), and a left the API while the pod watch relisted, so the
    // memory holds no departure of it, only an older pod's of its name
    // (simulation pool seed 30006413: two readers). Its process never
    // learned of the revoke and reads on until the kubelet kills it: the
    // drain counts from when the relist ended at the earliest, not from
    // the revoke nor the older departure.
    let mut obs = a_not_ready(false);
    obs.pods.remove(0);
    let mut older = departure(Containers::Stopped);
    older.uid = "uid-a-before".into();
    older.generated_name = false;
    older.at = t0() - secs(60);
    obs.departed = remembered(vec![older]);
    obs.departed.watched_since = None;
    obs.departed.relisting = true;
    obs.now = t0() + secs(40);
    assert_eq!(evidence(&plan(&obs)), [], "relisting: nothing bounds it");
    obs.departed.watched_since = Some(t0() + secs(20));
    obs.departed.relisting = false;
    assert_eq!(evidence(&plan(&obs)), []);
    obs.now = t0() + secs(50);
    assert_eq!(evidence(&plan(&obs)), [Evidence::DrainTimeout; 2]);
}

#[test]
fn gone_unseen_is_no_evidence() {
    both(|lease_table| {
        // A restarted operator: the departure happened before its watch
        // listed the pods, so nothing says how the pod left.
        let mut obs = a_not_ready(lease_table);
        obs.pods.remove(0);
        obs.departed = Departures {
            watched_since: Some(t0() + secs(1)),
            ..Default::default()
        };
        assert_eq!(evidence(&plan(&obs)), []);
        // Nor does a departure the memory already forgot.
        obs.departed = remembered(Vec::new());
        assert_eq!(evidence(&plan(&obs)), []);
    });
}

#[test]
fn gone_with_only_a_predecessor_remembered_needs_a_watch_since_its_departure() {
    both(|lease_table| {
        // A StatefulSet pod whose object is gone, and whose memory holds
        // only its predecessor's departure (stopped, long ago): the pod
        // itself may have been force-deleted while the watch relisted,
        // leaving no departure, and still run (simulation seed
        // 910585342: two readers). Its predecessor's name being older
        // than the retention says nothing about pods after it.
        let mut obs = a_not_ready(lease_table);
        obs.pods.remove(0);
        let mut predecessor = departure(Containers::Stopped);
        predecessor.uid = "uid-a-before".into();
        predecessor.generated_name = false;
        predecessor.at = t0() - secs(1_200);
        predecessor.created = Some(t0() - secs(3_600));
        let mut departed = remembered(vec![predecessor]);
        // Relisting now, or listed again since that departure: no evidence.
        departed.watched_since = None;
        obs.departed = departed.clone();
        assert_eq!(evidence(&plan(&obs)), [], "{lease_table}");
        departed.watched_since = Some(t0() - secs(300));
        obs.departed = departed.clone();
        assert_eq!(evidence(&plan(&obs)), [], "{lease_table}");
        // Watching since before it: a later pod of the name that left
        // would be remembered, so the predecessor was the last.
        departed.watched_since = Some(t0() - secs(1_500));
        obs.departed = departed;
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
    });
}

#[test]
fn a_node_that_stopped_reporting_is_no_evidence() {
    both(|lease_table| {
        // Terminating, and its status still says running (its kubelet
        // cannot reach the API, or has not stopped the process yet).
        let mut obs = a_revoked(lease_table);
        obs.pods[0].ready = false;
        obs.now = t0() + secs(29);
        obs.leases = leases(&obs, lease_table);
        assert_eq!(evidence(&plan(&obs)), []);
        // A restarting container is not stopped either: only a
        // terminating pod's terminated containers are.
        let mut restarting = a_revoked(lease_table);
        restarting.pods[0].deletion_timestamp = None;
        restarting.pods[0].ready = false;
        restarting.pods[0].containers = Containers::Running;
        assert_eq!(evidence(&plan(&restarting)), []);
    });
}

#[test]
fn an_earlier_pod_of_the_same_name_that_may_still_run_blocks_it() {
    both(|lease_table| {
        // A StatefulSet pod force-deleted while running, recreated under
        // its name, not scheduled yet: the new pod never ran, the old
        // process may still read.
        let mut obs = a_revoked(lease_table);
        obs.pods[0] = PodInfo {
            uid: "uid-a-2".into(),
            ready: false,
            ready_since: None,
            node_name: None,
            containers: Containers::NeverRan,
            created: Some(t0() + secs(1)),
            generated_name: false,
            ..pod("a")
        };
        let mut old = departure(Containers::Running);
        old.generated_name = false;
        obs.departed = remembered(vec![old.clone()]);
        assert_eq!(evidence(&plan(&obs)), []);
        // The same after a graceful deletion the kubelet confirmed.
        old.containers = Containers::Stopped;
        obs.departed = remembered(vec![old]);
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
    });
}

#[test]
fn a_reused_name_needs_a_memory_that_saw_every_recent_departure() {
    both(|lease_table| {
        // The StatefulSet pod again, its predecessor's departure not
        // remembered: a watch that started a minute ago may have missed
        // it; one that watched longer than its retention did not (or
        // the departure was long enough ago to be over).
        let mut obs = a_revoked(lease_table);
        obs.pods[0].containers = Containers::Stopped;
        obs.pods[0].generated_name = false;
        obs.pods[0].created = Some(t0() - secs(60));
        obs.departed.watched_since = Some(t0() - secs(60));
        assert_eq!(evidence(&plan(&obs)), []);
        obs.departed.watched_since = None;
        assert_eq!(evidence(&plan(&obs)), []);
        obs.departed.watched_since = Some(t0() - secs(601));
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        obs.departed.watched_since = None;
        obs.pods[0].created = Some(t0() - secs(601));
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
        // A generated name is never reused: no memory needed.
        obs.pods[0].created = Some(t0() - secs(60));
        obs.pods[0].generated_name = true;
        assert_eq!(evidence(&plan(&obs)), [Evidence::PodStopped; 2]);
    });
}

#[test]
fn pod_stopped_has_its_metrics_label() {
    assert_eq!(Evidence::PodStopped.label(), "pod_stopped");
}
