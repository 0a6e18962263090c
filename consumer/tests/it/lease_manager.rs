//! The lease manager against dynalite: take only while assigned, create vs
//! take, renew and checkpoint conditional on owner and counter, release,
//! expiry takeover after the failover time, and conditional-write conflicts.

use std::time::Duration;

use shardring_consumer::PodView;
use shardring_consumer::lease::{
    Checkpoint, LeaseConfig, LeaseError, LeaseManager, TakeOutcome, create_table,
};
use shardring_consumer::view::{self, AssignmentView, ViewPublisher};

use crate::support;

const TABLE: &str = "leases";

fn manager(client: &aws_sdk_dynamodb::Client, worker: &str, failover: Duration) -> LeaseManager {
    LeaseManager::new(
        client.clone(),
        LeaseConfig {
            table: TABLE.into(),
            worker_id: worker.into(),
            failover,
        },
    )
}

fn view(epoch: u64, active: &[&str]) -> (ViewPublisher, AssignmentView) {
    let (publisher, view) = view::channel();
    publisher.offer(PodView {
        epoch,
        active: active.iter().map(|s| (*s).to_owned()).collect(),
        ..PodView::default()
    });
    (publisher, view)
}

#[tokio::test]
async fn take_renew_checkpoint_release_and_expiry_takeover() {
    let dynamo = support::dynamodb();
    let client = support::dynamodb_client(&dynamo.endpoint()).await;
    create_table(&client, TABLE, Duration::from_secs(30))
        .await
        .unwrap();
    let failover = Duration::from_millis(600);
    let a = manager(&client, "pod-a", failover);
    let b = manager(&client, "pod-b", failover);
    let (_pa, view_a) = view(1, &["s1", "s2"]);
    let (_pb, view_b) = view(1, &["s3"]);

    // Not assigned: no write at all.
    assert_eq!(
        a.take("s3", &view_a).await.unwrap(),
        TakeOutcome::NotAssigned
    );
    assert_eq!(a.fetch("s3").await.unwrap(), None);

    // Create: owner a, counter 1, TRIM_HORIZON.
    let TakeOutcome::Taken(lease) = a.take("s1", &view_a).await.unwrap() else {
        panic!("expected Taken");
    };
    assert_eq!(lease.owner.as_deref(), Some("pod-a"));
    assert_eq!(lease.counter, Some(1));
    assert_eq!(lease.checkpoint, Some(Checkpoint::TrimHorizon));
    assert_eq!(
        a.take("s1", &view_a).await.unwrap(),
        TakeOutcome::AlreadyHeld
    );
    assert!(a.is_valid("s1"));

    a.renew("s1").await.unwrap();
    a.checkpoint("s1", &Checkpoint::Sequence("123".into()))
        .await
        .unwrap();
    let row = a.fetch("s1").await.unwrap().unwrap();
    assert_eq!(row.counter, Some(3));
    assert_eq!(row.checkpoint, Some(Checkpoint::Sequence("123".into())));

    // b is assigned s1 now (a newer epoch somewhere else), but a holds it and
    // keeps renewing: b never takes it.
    let (pb2, view_b2) = view(2, &["s1"]);
    match b.take("s1", &view_b2).await.unwrap() {
        TakeOutcome::HeldByOther { owner, .. } => assert_eq!(owner, "pod-a"),
        other => panic!("expected HeldByOther, got {other:?}"),
    }
    for _ in 0..4 {
        tokio::time::sleep(failover / 3).await;
        a.renew("s1").await.unwrap();
        assert!(matches!(
            b.take("s1", &view_b2).await.unwrap(),
            TakeOutcome::HeldByOther { .. }
        ));
    }

    // a stops renewing (crashed): after the failover time b takes it over,
    // keeping a's checkpoint; a's next write is a conflict and a forgets it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let taken = loop {
        match b.take("s1", &view_b2).await.unwrap() {
            TakeOutcome::Taken(lease) => break lease,
            TakeOutcome::HeldByOther { .. } => {
                assert!(std::time::Instant::now() < deadline, "never expired");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(taken.owner.as_deref(), Some("pod-b"));
    assert_eq!(taken.checkpoint, Some(Checkpoint::Sequence("123".into())));
    assert_eq!(taken.owner_switches_since_checkpoint, Some(1));
    assert!(!a.is_valid("s1"), "a's hold has lapsed");
    assert!(matches!(
        a.renew("s1").await,
        Err(LeaseError::Conflict { .. })
    ));
    assert!(matches!(a.renew("s1").await, Err(LeaseError::NotHeld(_))));
    assert!(matches!(
        a.checkpoint("s1", &Checkpoint::Sequence("999".into()))
            .await,
        Err(LeaseError::NotHeld(_))
    ));
    assert_eq!(
        b.fetch("s1").await.unwrap().unwrap().checkpoint,
        Some(Checkpoint::Sequence("123".into()))
    );

    // Release clears the owner at once; a freed lease is taken immediately.
    b.release("s1").await.unwrap();
    let row = b.fetch("s1").await.unwrap().unwrap();
    assert_eq!(row.owner, None);
    assert!(b.held().is_empty());
    let (_pa3, view_a3) = view(3, &["s1"]);
    assert!(matches!(
        a.take("s1", &view_a3).await.unwrap(),
        TakeOutcome::Taken(_)
    ));

    // SHARD_END: the lease is complete and never taken again.
    a.checkpoint_shard_end("s1", &["s4".into(), "s5".into()])
        .await
        .unwrap();
    let row = a.fetch("s1").await.unwrap().unwrap();
    assert_eq!(row.checkpoint, Some(Checkpoint::ShardEnd));
    assert_eq!(row.child_shard_ids, vec!["s4", "s5"]);
    a.release("s1").await.unwrap();
    assert_eq!(b.take("s1", &view_b2).await.unwrap(), TakeOutcome::Complete);

    // Releasing on a view change: only unassigned shards are dropped.
    assert!(matches!(
        a.take("s2", &view_a).await.unwrap(),
        TakeOutcome::Taken(_)
    ));
    let (pa4, view_a4) = view(4, &["s2"]);
    assert!(a.release_unassigned(&view_a4).await.is_empty());
    pa4.offer(PodView {
        epoch: 5,
        revoking: vec!["s2".into()],
        ..PodView::default()
    });
    assert_eq!(a.release_unassigned(&view_a4).await, vec!["s2"]);
    assert_eq!(a.fetch("s2").await.unwrap().unwrap().owner, None);
    drop((pb2, view_b));
}

#[tokio::test]
async fn racing_creates_and_takes_have_exactly_one_winner() {
    let dynamo = support::dynamodb();
    let client = support::dynamodb_client(&dynamo.endpoint()).await;
    create_table(&client, TABLE, Duration::from_secs(30))
        .await
        .unwrap();
    let failover = Duration::from_secs(10);
    let workers: Vec<LeaseManager> = (0..6)
        .map(|i| manager(&client, &format!("pod-{i}"), failover))
        .collect();
    let (_p, assigned) = view(1, &["race"]);
    let results = futures_join(&workers, &assigned).await;
    let winners = results
        .iter()
        .filter(|r| matches!(r, Ok(TakeOutcome::Taken(_))))
        .count();
    assert_eq!(winners, 1, "{results:?}");
    assert!(results.iter().all(|r| matches!(
        r,
        Ok(TakeOutcome::Taken(_))
            | Ok(TakeOutcome::HeldByOther { .. })
            | Err(LeaseError::Conflict { .. })
    )));
    let owner = workers[0]
        .fetch("race")
        .await
        .unwrap()
        .unwrap()
        .owner
        .unwrap();
    // The loser with a stale counter cannot checkpoint or renew.
    for worker in &workers {
        let held = worker.held();
        assert_eq!(held.is_empty(), worker.config().worker_id != owner);
    }

    // A free lease raced by two: one wins, the other gets a conflict.
    let winner = workers
        .iter()
        .find(|w| w.config().worker_id == owner)
        .unwrap();
    winner.release("race").await.unwrap();
    let results = futures_join(&workers, &assigned).await;
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, Ok(TakeOutcome::Taken(_)) | Ok(TakeOutcome::AlreadyHeld)))
            .count(),
        1,
        "{results:?}"
    );
}

async fn futures_join(
    workers: &[LeaseManager],
    view: &AssignmentView,
) -> Vec<Result<TakeOutcome, LeaseError>> {
    futures::future::join_all(workers.iter().map(|worker| worker.take("race", view))).await
}

/// `take_preparing` hands what is prepared (e.g. a shard iterator asked for
/// while the lease is written) the checkpoint the lease holds, and runs it
/// only when the lease can be taken.
#[tokio::test]
async fn take_preparing_prepares_from_the_leases_checkpoint_only_when_it_takes() {
    let dynamo = support::dynamodb();
    let client = support::dynamodb_client(&dynamo.endpoint()).await;
    create_table(&client, TABLE, Duration::from_secs(30))
        .await
        .unwrap();
    let a = manager(&client, "pod-a", Duration::from_secs(30));
    let b = manager(&client, "pod-b", Duration::from_secs(30));
    let (_pa, view_a) = view(1, &["s1"]);
    let (_pb, view_b) = view(2, &["s1"]);
    let echo = |checkpoint: Option<Checkpoint>| async move { checkpoint };

    // A new lease: created, prepared from TRIM_HORIZON.
    let (outcome, prepared) = a.take_preparing("s1", &view_a, echo).await.unwrap();
    assert!(matches!(outcome, TakeOutcome::Taken(_)), "{outcome:?}");
    assert_eq!(prepared, Some(Some(Checkpoint::TrimHorizon)));
    a.checkpoint("s1", &Checkpoint::Sequence("42".into()))
        .await
        .unwrap();

    // Held by a: b prepares nothing.
    let (outcome, prepared) = b.take_preparing("s1", &view_b, echo).await.unwrap();
    assert!(
        matches!(outcome, TakeOutcome::HeldByOther { .. }),
        "{outcome:?}"
    );
    assert_eq!(prepared, None);

    // Released by a: b takes it, prepared from a's checkpoint.
    a.release("s1").await.unwrap();
    let (outcome, prepared) = b.take_preparing("s1", &view_b, echo).await.unwrap();
    let TakeOutcome::Taken(lease) = outcome else {
        panic!("expected Taken, got {outcome:?}");
    };
    assert_eq!(lease.checkpoint, Some(Checkpoint::Sequence("42".into())));
    assert_eq!(prepared, Some(lease.checkpoint));
}
