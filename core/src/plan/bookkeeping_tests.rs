//! What a status write of bookkeeping only is: pod counts, load strings,
//! the pool balance, the last pod change and condition texts may change;
//! anything a consumer, an alert or the handoff protocol acts on may not.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::{StatusWrite, bookkeeping_only};
use crate::crds::ShardGroupStatus;
use crate::crds::shard_group::PodCounts;
use crate::fixtures::now;

fn condition(status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(1),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()),
    }
}

fn status() -> ShardGroupStatus {
    ShardGroupStatus {
        epoch: 4,
        pods: PodCounts {
            selected: 8,
            eligible: 8,
        },
        conditions: vec![condition("True", "Published", "8 pods")],
        ..ShardGroupStatus::default()
    }
}

#[test]
fn counts_texts_and_the_pod_change_are_bookkeeping() {
    let before = status();
    let mut after = before.clone();
    after.pods.selected = 9;
    after.pods.eligible = 9;
    after.last_pod_change = Some(now());
    after.pod_set_digest = Some("d".into());
    after.conditions = vec![condition("True", "Published", "9 pods")];
    assert!(bookkeeping_only(&before, &after));
    let write = StatusWrite::new(Some(&before), after);
    assert!(write.write().is_some() && write.only_bookkeeping());
}

#[test]
fn an_epoch_a_move_or_a_condition_is_not() {
    let before = status();
    let mut epoch = before.clone();
    epoch.epoch = 5;
    let mut moving = before.clone();
    moving.moves_in_flight = 1;
    let mut not_ready = before.clone();
    not_ready.conditions = vec![condition("False", "NoReadyPods", "0 pods")];
    for after in [epoch, moving, not_ready] {
        assert!(!bookkeeping_only(&before, &after), "{after:?}");
    }
    // Nothing observed yet: the first status is written at once.
    assert!(!StatusWrite::new(None, before).only_bookkeeping());
}
