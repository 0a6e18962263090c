//! Pure tests of the controller's plan step: no API server, just
//! observations in and decisions out.

use std::sync::Arc;
use std::time::Duration;

use shardring_core::EventKind;
use shardring_core::conditions::{self, reason};
use shardring_core::observation::Published;
use shardring_core::plan::{self, Moves, plan};
use shardring_core::topology::{SourceError, Topology};
use shardring_crds::ShardPhase;

use shardring_core::fixtures::*;

fn condition<'a>(status: &'a shardring_crds::ShardGroupStatus, type_: &str) -> (&'a str, &'a str) {
    let c = conditions::find(&status.conditions, type_)
        .unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn first_publish_writes_the_document_every_annotation_and_status() {
    let obs = observation(8, pods(4));
    let d = plan(&obs);
    let doc = d
        .document_write
        .as_ref()
        .map(|w| &w.document)
        .expect("first plan publishes");
    assert_eq!(doc.epoch, 1);
    assert_eq!(doc.shard_group, "prod/orders");
    assert_eq!(doc.shards.len(), 8);
    assert!(
        doc.shards
            .values()
            .all(|r| r.state == ShardPhase::Active && r.owner.is_some())
    );
    assert_eq!(doc.pods.len(), 4);
    assert!(
        doc.pods.values().all(|p| p.active.len() == 2),
        "{:?}",
        doc.pods
    );
    assert_eq!(d.annotation_writes.len(), 4);
    for write in &d.annotation_writes {
        let view = write.view.as_ref().unwrap();
        assert_eq!(view.epoch, 1);
        assert_eq!(view.active, doc.pods[&write.pod].active);
        assert_eq!(
            write.uid.as_deref(),
            Some(format!("uid-{}", write.pod).as_str())
        );
    }
    assert!(d.status.write().is_some());
    assert_eq!(d.status.epoch, 1);
    assert_eq!(d.status.observed_generation, Some(1));
    assert_eq!(
        (
            d.status.shards.total,
            d.status.pods.selected,
            d.status.pods.eligible
        ),
        (8, 4, 4)
    );
    assert_eq!(d.status.load.as_deref(), Some("2/2"));
    assert_eq!(d.status.source.as_deref(), Some("static:8"));
    assert_eq!(
        condition(&d.status, conditions::READY),
        ("True", reason::PUBLISHED)
    );
    assert_eq!(
        condition(&d.status, conditions::BALANCED),
        ("True", reason::BALANCED)
    );
    assert_eq!(
        condition(&d.status, conditions::PROGRESSING),
        ("False", reason::STABLE)
    );
    assert_eq!(
        condition(&d.status, conditions::DEGRADED),
        ("False", reason::AS_EXPECTED)
    );
    assert_eq!(d.events.len(), 1);
    assert_eq!(
        (d.events[0].kind, d.events[0].reason),
        (EventKind::Normal, reason::PUBLISHED)
    );
    assert_eq!(d.requeue_after, Duration::from_secs(300));
}

#[test]
fn an_unchanged_world_writes_nothing() {
    let settled = settle(observation(8, pods(4)));
    let d = plan(&settled);
    assert_eq!(d.document_write, None);
    assert!(d.annotation_writes.is_empty(), "{:?}", d.annotation_writes);
    assert!(
        d.status.write().is_none(),
        "status differs: {:#?}",
        d.status
    );
    assert!(d.events.is_empty());
    assert_eq!(document(&settled).epoch, 1);
}

#[test]
#[allow(clippy::redundant_clone)] // a separate copy is the point: the decision must not depend on the instance
fn the_same_observation_gives_the_same_decision() {
    let obs = settle(observation(20, pods(3)));
    let mut obs2 = obs.clone();
    obs2.pods.push(pod_info("consumer-9"));
    assert_eq!(plan(&obs2), plan(&obs2.clone()));
}

/// One group's plan memory, kept across a sequence of plans as the operator
/// keeps it (pods joining, leaving, several at once, the whole pool
/// replaced, a pool too small to keep a ring, the source read again into a
/// new list of shards, one partition replaced by another, one fewer), never
/// changes a decision: each equals the plan without memory.
#[test]
fn a_plan_with_the_groups_memory_decides_as_a_plan_without() {
    let mut memory = plan::PlanMemory::default();
    let mut obs = settle(observation(1_200, pods(300)));
    obs.group.spec.rebalance.delay = "0s".into();
    let steps: Vec<fn(&mut shardring_core::Observation)> = vec![
        |o| o.pods.push(pod_info("consumer-joined")),
        |o| o.pods.retain(|p| p.name != "consumer-7"),
        |o| {
            o.pods.retain(|p| !p.name.ends_with('3'));
            o.pods
                .extend((0..20).map(|i| pod_info(&format!("wave-{i}"))));
        },
        |o| o.pods[5].deletion_timestamp = Some(o.now),
        |o| o.pods = (0..300).map(|i| pod_info(&format!("other-{i}"))).collect(),
        |o| o.pods.truncate(10),
        |o| {
            o.pods
                .extend((0..290).map(|i| pod_info(&format!("back-{i}"))))
        },
        |o| o.topology.last_good = Some(Arc::new(reread(o, |_| {}))),
        |o| {
            o.topology.last_good = Some(Arc::new(reread(o, |shards| {
                shards[0].id = "orders-replaced".into();
            })))
        },
        |o| {
            o.topology.last_good = Some(Arc::new(reread(o, |shards| {
                shards.pop();
            })))
        },
    ];
    for (n, step) in steps.iter().enumerate() {
        step(&mut obs);
        for _ in 0..3 {
            let (with_memory, _) = plan::plan_with(&obs, &mut memory);
            assert_eq!(with_memory, plan(&obs), "step {n}");
            // The document published is the one the plan with memory
            // built, as in the operator (its memory then knows it).
            obs = later(apply(obs, with_memory), 31);
        }
    }
}

/// The same at the size where the document is gzip: each publish after the
/// first is encoded from the chunks of the one before, told which records
/// changed; its bytes are those of an encode from nothing (the plan
/// without memory), for a pod joining, one leaving, the moves each starts
/// completing, and several pods at once. Every other publish is prepared
/// for the next plan as the cycle prepares it (`PlanMemory::prepare`: the
/// next document patches a copy made then), the others are not (a plan
/// that moves shards copies the document on a thread of its own).
#[test]
fn a_plan_encoding_from_the_last_documents_chunks_encodes_as_one_from_nothing() {
    let mut memory = plan::PlanMemory::default();
    let mut obs = settle(observation(16_000, pods(1_000)));
    obs.group.spec.rebalance.delay = "0s".into();
    let (first, _) = plan::plan_with(&obs, &mut memory);
    assert_eq!(first, plan(&obs));
    obs = apply(obs, first);
    memory.prepare(obs.published.shared_document().expect("published"));
    let mut publishes = 0;
    let steps: Vec<fn(&mut shardring_core::Observation)> = vec![
        |o| o.pods.push(pod_info("consumer-joined")),
        |o| o.pods.retain(|p| p.name != "consumer-7"),
        |o| {
            o.pods.retain(|p| !p.name.ends_with("13"));
            o.pods
                .extend((0..5).map(|i| pod_info(&format!("wave-{i}"))));
        },
    ];
    let mut gzipped = 0;
    for (n, step) in steps.iter().enumerate() {
        step(&mut obs);
        for _ in 0..2 {
            let (with_memory, _) = plan::plan_with(&obs, &mut memory);
            assert_eq!(with_memory, plan(&obs), "step {n}");
            gzipped += with_memory.document_write.as_ref().map_or(0, |write| {
                usize::from(
                    write.encoded.encoding == shardring_crds::assignment::encoding::Encoding::Gzip,
                )
            });
            let published = with_memory.document_write.is_some();
            obs = later(apply(obs, with_memory), 31);
            if published {
                publishes += 1;
                if publishes % 2 == 0 {
                    memory.prepare(obs.published.shared_document().expect("published"));
                }
            }
        }
    }
    assert!(gzipped >= steps.len(), "{gzipped} gzip documents published");
}

/// The topology of `obs` read again: its shards in a new list, changed by
/// `change`.
fn reread(
    obs: &shardring_core::Observation,
    change: impl FnOnce(&mut Vec<shardring_engine::Shard>),
) -> Topology {
    let mut shards = (*obs.topology.last_good.as_ref().unwrap().shards).clone();
    change(&mut shards);
    Topology {
        shards: Arc::new(shards),
    }
}

#[test]
fn a_joining_pod_gets_its_share_and_only_affected_pods_are_written() {
    let mut obs = settle(observation(8, pods(4)));
    obs.group.spec.rebalance.delay = "0s".into();
    obs.pods.push(pod_info("consumer-4"));
    let d = plan(&obs);
    let doc = d
        .document_write
        .as_ref()
        .map(|w| &w.document)
        .expect("a pod joined");
    assert_eq!(doc.epoch, 2);
    // Two phases: the shards are first revoked from their owners only.
    assert!(!doc.pods.contains_key("consumer-4"));
    let moved: usize = doc.pods.values().map(|p| p.revoking.len()).sum();
    assert!(moved >= 1);
    // The pods that give the new pod a shard; nobody else.
    assert_eq!(
        d.annotation_writes.len(),
        moved,
        "{:?}",
        d.annotation_writes
    );
    assert!(
        d.annotation_writes
            .iter()
            .all(|w| w.view.as_ref().unwrap().epoch == 2)
    );
    assert_eq!(d.status.epoch, 2);
    assert_eq!(d.status.pods.eligible, 5);
    // Once the drain timeout passed after the revoke reached the pods, the
    // new pod gets them, at a higher epoch.
    let obs = settle(settle(obs));
    let obs = settle(later(obs, 61));
    let doc = document(&obs);
    assert_eq!(doc.pods["consumer-4"].active.len(), moved);
    assert!(doc.pods.values().all(|p| p.revoking.is_empty()));
    assert_eq!(doc.epoch, 3);
}

/// The observation `secs` seconds later.
fn later(
    mut obs: shardring_core::observation::Observation,
    secs: i64,
) -> shardring_core::observation::Observation {
    obs.now += jiff::SignedDuration::from_secs(secs);
    obs
}

#[test]
fn a_deleted_pod_loses_its_shards_and_is_not_written() {
    let mut obs = settle(observation(8, pods(4)));
    let gone = obs.pods.remove(3);
    // Its shards are revoked first; without a lease table and never seen
    // terminating, they move once the drain timeout has passed.
    let revoked = settle(obs.clone());
    assert_eq!(document(&revoked).pods[&gone.name].revoking.len(), 2);
    obs = later(revoked, 61);
    let d = plan(&obs);
    let doc = d.document_write.as_ref().map(|w| &w.document).unwrap();
    assert!(!doc.pods.contains_key(&gone.name));
    assert!(
        doc.shards
            .values()
            .all(|r| r.owner.as_deref() != Some(gone.name.as_str()))
    );
    assert!(d.annotation_writes.iter().all(|w| w.pod != gone.name));
    assert_eq!(
        d.annotation_writes.len(),
        2,
        "the two shards land on two pods"
    );
    assert!(d.handoffs.iter().all(|h| h.from == gone.name));
}

#[test]
fn a_pod_that_leaves_the_pool_loses_its_annotation() {
    let mut obs = settle(observation(8, pods(4)));
    obs.pods[0].selected = false;
    let obs = later(settle(settle(obs)), 61);
    let d = plan(&obs);
    let removal = d
        .annotation_writes
        .iter()
        .find(|w| w.pod == "consumer-0")
        .expect("removal");
    assert_eq!(removal.view, None);
    assert!(
        !d.document_write
            .as_ref()
            .unwrap()
            .document
            .pods
            .contains_key("consumer-0")
    );
}

#[test]
fn a_pod_without_shards_has_no_annotation() {
    let obs = settle(observation(2, pods(3)));
    let without: Vec<_> = obs.pods.iter().filter(|p| p.annotation.is_none()).collect();
    assert_eq!(without.len(), 1);
    assert!(!document(&obs).pods.contains_key(&without[0].name));
}

#[test]
fn unready_and_terminating_pods_get_nothing() {
    let mut ps = pods(4);
    ps[1].ready = false;
    ps[2].deletion_timestamp = Some(now());
    let d = plan(&observation(6, ps));
    let doc = d.document_write.unwrap().document;
    assert_eq!(
        doc.pods.keys().collect::<Vec<_>>(),
        ["consumer-0", "consumer-3"]
    );
    assert_eq!(d.status.pods.eligible, 2);
    assert_eq!(d.status.pods.selected, 4);
}

#[test]
fn a_terminating_owner_hands_its_shards_over() {
    let mut obs = settle(observation(8, pods(4)));
    obs.pods[2].deletion_timestamp = Some(now());
    obs.pods[2].deletion_grace_seconds = Some(30);
    let d = plan(&obs);
    assert_eq!(d.moves.required, 2, "two required moves");
    // All its shards are revoked at once; nobody else gets them yet.
    let doc = d.document_write.unwrap().document;
    assert_eq!(doc.pods["consumer-2"].revoking.len(), 2);
    assert!(doc.pods["consumer-2"].active.is_empty());
    assert_eq!(d.status.graceful_pods, ["consumer-2"]);
    // The pod is gone after its graceful deletion. Without a lease table
    // that is no proof its process stopped (a force deletion of a
    // terminating pod looks the same): the shards move on once the drain
    // timeout since the revoke has passed.
    let mut obs = settle(settle(obs));
    obs.pods.remove(2);
    let d = plan(&obs);
    assert!(
        d.handoffs.is_empty(),
        "not on the pod's disappearance alone"
    );
    let d = plan(&later(obs, 61));
    let doc = d.document_write.unwrap().document;
    assert!(!doc.pods.contains_key("consumer-2"));
    assert_eq!(d.handoffs.len(), 2);
    assert!(
        d.handoffs
            .iter()
            .all(|h| h.evidence == shardring_core::handoff::Evidence::DrainTimeout)
    );
}

#[test]
fn min_ready_seconds_delays_a_new_pod_and_schedules_a_requeue() {
    let mut obs = settle(observation(8, pods(2)));
    obs.pool = Some(pool(60));
    let mut fresh = pod_info("consumer-new");
    fresh.ready_since = Some(now() - jiff::SignedDuration::from_secs(20));
    obs.pods.push(fresh);
    let d = plan(&obs);
    assert_eq!(d.document_write, None, "not eligible yet");
    assert!(d.annotation_writes.is_empty());
    assert_eq!(d.requeue_after, Duration::from_secs(40));
    assert_eq!(d.status.pods.eligible, 2);
}

#[test]
fn a_missing_pool_keeps_the_assignment_and_says_so() {
    let mut obs = settle(observation(8, pods(4)));
    obs.pool = None;
    let d = plan(&obs);
    assert_eq!(d.document_write, None);
    assert!(d.annotation_writes.is_empty());
    assert_eq!(
        condition(&d.status, conditions::READY),
        ("False", reason::POOL_NOT_FOUND)
    );
    assert_eq!(
        condition(&d.status, conditions::DEGRADED),
        ("True", reason::POOL_NOT_FOUND)
    );
    assert_eq!(d.status.epoch, 1);
    assert_eq!(d.status.shards.total, 8, "last known counts stay");
    assert_eq!(d.events.len(), 1);
    assert_eq!(
        (d.events[0].kind, d.events[0].reason),
        (EventKind::Warning, reason::POOL_NOT_FOUND)
    );
    // The warning is not repeated while nothing changes.
    let mut again = obs;
    again.group.status = Some(d.status.into_status());
    let d2 = plan(&again);
    assert!(d2.events.is_empty() && d2.status.write().is_none());
}

#[test]
fn no_ready_pods_keeps_the_last_assignment() {
    let mut obs = settle(observation(8, pods(4)));
    for p in &mut obs.pods {
        p.ready = false;
    }
    let d = plan(&obs);
    assert_eq!(d.document_write, None);
    assert!(d.annotation_writes.is_empty(), "annotations stay in place");
    assert_eq!(
        condition(&d.status, conditions::READY),
        ("False", reason::NO_READY_PODS)
    );
    assert_eq!(
        condition(&d.status, conditions::DEGRADED),
        ("True", reason::NO_READY_PODS)
    );
    assert!(
        conditions::find(&d.status.conditions, conditions::READY)
            .unwrap()
            .message
            .contains("epoch 1")
    );
    // Recovery: pods come back, nothing moved, Degraded clears with a Normal event.
    let mut back = obs.clone();
    back.group.status = Some(d.status.into_status());
    for p in &mut back.pods {
        p.ready = true;
    }
    let d2 = plan(&back);
    assert_eq!(d2.document_write, None);
    assert_eq!(
        condition(&d2.status, conditions::READY),
        ("True", reason::PUBLISHED)
    );
    assert_eq!(d2.events.len(), 1);
    assert_eq!(d2.events[0].reason, reason::RECOVERED);
}

#[test]
fn a_failed_read_plans_on_the_last_good_topology() {
    let mut obs = settle(observation(8, pods(4)));
    obs.topology.error = Some(SourceError::Throttled("ListShards".into()));
    obs.group.spec.rebalance.delay = "0s".into();
    obs.pods.push(pod_info("consumer-4"));
    let d = plan(&obs);
    let doc = d
        .document_write
        .as_ref()
        .map(|w| &w.document)
        .expect("pods still move");
    assert_eq!(doc.shards.len(), 8, "never shrinks");
    assert_eq!(
        condition(&d.status, conditions::READY),
        ("True", reason::PUBLISHED)
    );
    assert_eq!(
        condition(&d.status, conditions::DEGRADED),
        ("True", "Throttled")
    );
    // Handoffs are in flight: look for evidence again soon.
    assert_eq!(d.requeue_after, plan::IN_FLIGHT_POLL);
}

#[test]
fn a_failed_read_without_any_topology_writes_nothing() {
    let mut obs = settle(observation(8, pods(4)));
    obs.topology.last_good = None;
    obs.topology.error = Some(SourceError::StreamNotFound("orders".into()));
    let d = plan(&obs);
    assert_eq!(d.document_write, None);
    assert!(d.annotation_writes.is_empty());
    assert_eq!(
        condition(&d.status, conditions::READY),
        ("False", "StreamNotFound")
    );
    assert_eq!(d.status.shards.total, 8);
}

#[test]
fn the_epoch_moves_only_on_change_and_never_goes_back() {
    let obs = settle(observation(8, pods(4)));
    assert_eq!(plan(&obs).status.epoch, 1);
    // The ConfigMap was deleted, but the status remembers epoch 7.
    let mut lost = obs.clone();
    lost.published = Published::Missing;
    lost.group.status.as_mut().unwrap().epoch = 7;
    let d = plan(&lost);
    assert_eq!(
        d.document_write
            .as_ref()
            .map(|w| &w.document)
            .unwrap()
            .epoch,
        8
    );
    // An unreadable ConfigMap is replaced, also continuing the epoch.
    let mut broken = obs;
    broken.published = Published::Unreadable("bad".into());
    assert_eq!(plan(&broken).document_write.unwrap().document.epoch, 2);
}

#[test]
fn a_deleted_annotation_is_repaired_without_a_new_epoch() {
    let mut obs = settle(observation(8, pods(4)));
    obs.pods[1].annotation = None;
    let d = plan(&obs);
    assert_eq!(d.document_write, None);
    assert_eq!(d.annotation_writes.len(), 1);
    assert_eq!(d.annotation_writes[0].view.as_ref().unwrap().epoch, 1);
}

#[test]
fn a_growing_source_adds_shards() {
    let mut obs = settle(observation(8, pods(4)));
    obs.group = group(12);
    obs.group.status = settle(observation(8, pods(4))).group.status;
    obs.topology = topology(12);
    let d = plan(&obs);
    let doc = d.document_write.unwrap().document;
    assert_eq!(doc.shards.len(), 12);
    assert!(doc.pods.values().all(|p| p.active.len() == 3));
    assert_eq!(
        d.moves,
        Moves::default(),
        "new shards are placements, not moves"
    );
}

#[test]
fn an_invalid_duration_is_reported_not_guessed() {
    let mut obs = observation(8, pods(2));
    obs.group.spec.handoff.drain_timeout = "soon".into();
    let d = plan(&obs);
    assert_eq!(d.document_write, None);
    assert_eq!(
        condition(&d.status, conditions::READY),
        ("False", reason::INVALID_SPEC)
    );
    assert!(
        conditions::find(&d.status.conditions, conditions::READY)
            .unwrap()
            .message
            .contains("handoff.drainTimeout")
    );
}
