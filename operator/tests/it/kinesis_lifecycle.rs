//! Parent before child, end to end on the emulators: the real topology and
//! lease readers feed the lifecycle and the engine's plan. Children of a
//! split are pending until the parent's lease reaches SHARD_END (or its lease
//! is removed after the children started), then go to the parent's owner.
//! Without a lease table, ordering is reported as not enforced and children
//! are assigned at once. Prints the split-to-pending latency it measures.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardring::engine::{PlanInput, PlanOutput, Pod, Previous, ShardState, plan};
use shardring::lease_table::{Checkpoint, LeaseRecord, LeaseTableReader};
use shardring::source::TopologySource;
use shardring::source::kinesis::{KinesisObservation, KinesisTopologySource};

use crate::support;
use crate::support::kcl_lease;

const PARENT: &str = "shardId-000000000000";
const TABLE: &str = "events-app";

fn pods() -> Vec<Pod> {
    vec![support::ready_pod("pod-a"), support::ready_pod("pod-b")]
}

fn plan_from(observation: &KinesisObservation, previous: &PlanOutput) -> PlanOutput {
    let previous = previous
        .assignment
        .iter()
        .filter_map(|(id, a)| Some((id.clone(), Previous::Owner(a.owner.clone()?))))
        .collect::<BTreeMap<_, _>>();
    let input = PlanInput {
        shards: observation.lifecycle.shards.clone().into(),
        pods: pods(),
        previous: previous.into(),
        ..PlanInput::default()
    };
    plan(&input).expect("plan")
}

fn owner(output: &PlanOutput, shard: &str) -> Option<String> {
    output.assignment.get(shard).and_then(|a| a.owner.clone())
}

async fn source(kinesis: &str, dynamo: Option<&str>, stream: &str) -> KinesisTopologySource {
    let reader = Arc::new(support::reader(kinesis, stream, None).await);
    let leases = match dynamo {
        Some(endpoint) => Some(Arc::new(LeaseTableReader::new(
            support::dynamodb_admin(endpoint).await,
            TABLE,
            Some(stream.to_owned()),
            None,
        ))),
        None => None,
    };
    KinesisTopologySource::new(reader, leases)
}

#[tokio::test]
async fn children_wait_for_the_parent_then_follow_its_owner() {
    let kinesis = support::kinesis();
    let dynamo = support::dynamodb();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    let ddb = support::dynamodb_admin(&dynamo.endpoint()).await;
    support::create_stream(&admin, "events", 1).await;
    support::create_lease_table(&ddb, TABLE).await;
    let source = source(&kinesis.endpoint(), Some(&dynamo.endpoint()), "events").await;
    assert_eq!(source.describe(), "kinesis:events");

    let first = source
        .observe(jiff::Timestamp::now())
        .await
        .expect("observe");
    assert!(first.lifecycle.ordering_enforced);
    let initial = plan_from(&first, &PlanOutput::default());
    let parent_owner = owner(&initial, PARENT).expect("parent placed");
    support::put_lease(
        &ddb,
        TABLE,
        &kcl_lease(
            PARENT,
            Some(&parent_owner),
            1,
            Checkpoint::Sequence("49000000000000000000000000000000000000000000000000000001".into()),
        ),
    )
    .await;

    // Split, and time how long until the plan shows the children pending.
    let started = Instant::now();
    support::split_in_half(&admin, "events", PARENT, 0, u128::MAX).await;
    let split_done = started.elapsed();
    let (observation, pending) = loop {
        let step = Instant::now();
        let observation = source
            .observe(jiff::Timestamp::now())
            .await
            .expect("observe");
        let output = plan_from(&observation, &initial);
        if output.pending.len() == 2 {
            println!(
                "measured: one observe (ListShards + lease scan + lifecycle) and plan: {:?}",
                step.elapsed()
            );
            break (observation, output);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "children never pending: {output:?}"
        );
    };
    let latency = started.elapsed();
    println!(
        "measured: SplitShard call -> children pending in the plan: {latency:?} (SplitShard until ACTIVE: {split_done:?}; then ListShards + lease scan + lifecycle + plan)"
    );
    let children: Vec<String> = pending.pending.clone();
    assert!(children.iter().all(|c| {
        observation
            .lifecycle
            .shards
            .iter()
            .any(|s| &s.id == c && s.parents == vec![PARENT.to_owned()])
    }));
    assert_eq!(
        observation
            .lifecycle
            .shards
            .iter()
            .find(|s| s.id == PARENT)
            .map(|s| s.state),
        Some(ShardState::Closed)
    );
    assert_eq!(
        owner(&pending, PARENT),
        Some(parent_owner.clone()),
        "the parent keeps its reader while it drains"
    );

    // The consumer reads the parent to its end.
    support::put_lease(
        &ddb,
        TABLE,
        &kcl_lease(PARENT, Some(&parent_owner), 2, Checkpoint::ShardEnd),
    )
    .await;
    let done = source
        .observe(jiff::Timestamp::now())
        .await
        .expect("observe");
    assert_eq!(
        done.lifecycle
            .shards
            .iter()
            .find(|s| s.id == PARENT)
            .map(|s| s.state),
        Some(ShardState::Complete)
    );
    let placed = plan_from(&done, &pending);
    assert!(placed.pending.is_empty(), "{placed:?}");
    assert!(
        !placed.assignment.contains_key(PARENT),
        "a complete parent drops out"
    );
    let owners: Vec<Option<String>> = children.iter().map(|c| owner(&placed, c)).collect();
    assert!(owners.iter().all(Option::is_some), "{owners:?}");
    assert!(
        owners.contains(&Some(parent_owner.clone())),
        "a child goes to the parent's owner: {owners:?}"
    );

    // The KCL deletes the parent's lease once the children have started
    // (checkpointed past TRIM_HORIZON): a fresh source (operator restart)
    // that never saw the parent's lease still sees the parent as complete.
    for child in &children {
        support::put_lease(
            &ddb,
            TABLE,
            &LeaseRecord {
                parent_shard_ids: vec![PARENT.into()],
                ..kcl_lease(
                    child,
                    Some(&parent_owner),
                    1,
                    Checkpoint::Sequence(
                        "49000000000000000000000000000000000000000000000000000002".into(),
                    ),
                )
            },
        )
        .await;
    }
    support::delete_lease(&ddb, TABLE, PARENT).await;
    let restarted = self::source(&kinesis.endpoint(), Some(&dynamo.endpoint()), "events").await;
    let after = restarted
        .observe(jiff::Timestamp::now())
        .await
        .expect("observe");
    assert_eq!(
        after
            .lifecycle
            .shards
            .iter()
            .find(|s| s.id == PARENT)
            .map(|s| s.state),
        Some(ShardState::Complete)
    );
    assert!(plan_from(&after, &placed).pending.is_empty());
}

#[tokio::test]
async fn a_failed_lease_read_holds_children_back() {
    let kinesis = support::kinesis();
    let dynamo = support::dynamodb();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "held", 1).await;
    support::split_in_half(&admin, "held", PARENT, 0, u128::MAX).await;
    // The table does not exist: nothing may be concluded about completion.
    let source = source(&kinesis.endpoint(), Some(&dynamo.endpoint()), "held").await;
    let observation = source
        .observe(jiff::Timestamp::now())
        .await
        .expect("topology still read");
    assert_eq!(
        observation.lease_error.as_ref().map(|e| e.reason()),
        Some("TableNotFound")
    );
    let output = plan_from(&observation, &PlanOutput::default());
    assert_eq!(output.pending.len(), 2, "{output:?}");
}

#[tokio::test]
async fn without_a_lease_table_children_are_assigned_at_once() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "loose", 1).await;
    support::split_in_half(&admin, "loose", PARENT, 0, u128::MAX).await;
    let source = source(&kinesis.endpoint(), None, "loose").await;
    let observation = source
        .observe(jiff::Timestamp::now())
        .await
        .expect("observe");
    assert!(!observation.lifecycle.ordering_enforced);
    assert_eq!(
        observation.lifecycle.lineage.len(),
        2,
        "lineage is still known"
    );
    let output = plan_from(&observation, &PlanOutput::default());
    assert!(output.pending.is_empty());
    assert_eq!(
        output.assignment.len(),
        3,
        "parent (closed, still draining) and both children: {output:?}"
    );
    // The TopologySource view is the same shards.
    let topology = source.read().await.expect("read");
    assert_eq!(*topology.shards, observation.lifecycle.shards);
}
