//! Reconciles that must send no request at all: nothing changed, a standby
//! replica, and time passing alone.

use std::sync::Arc;
use std::time::Duration;

use kube::core::DeserializeGuard;
use shardring::controller::{Context, ControllerMetrics, reconcile};

use super::harness::{reconcile_once, settle, three_pods, world};
use super::mock::mock_client;
use shardring_core::fixtures::*;

#[tokio::test]
async fn a_reconcile_with_nothing_to_change_sends_no_request() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let seen = reconcile_once(&group, &world.stores).await;
    assert!(seen.is_empty(), "no-op reconcile sent {seen:#?}");
}

#[tokio::test]
async fn a_standby_replica_never_writes() {
    let group = group(6);
    let world = world(Some(pool(0)), &three_pods());
    let (client, seen) = mock_client(group.clone());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(
        Context::builder(client, ControllerMetrics::default())
            .leader(rx)
            .build(world.stores.clone()),
    );
    reconcile(Arc::new(DeserializeGuard(Ok(group))), ctx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(seen.lock().is_empty());
}

#[tokio::test]
async fn time_passing_alone_writes_nothing() {
    let mut group = group(6);
    let mut world = world(Some(pool(0)), &three_pods());
    settle(&mut group, &mut world).await;
    let (client, seen) = mock_client(group.clone());
    let later = now() + jiff::SignedDuration::from_secs(3600);
    let ctx = Arc::new(
        Context::builder(client, ControllerMetrics::default())
            .clock(Arc::new(move || later))
            .build(world.stores.clone()),
    );
    reconcile(Arc::new(DeserializeGuard(Ok(group))), ctx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let seen = seen.lock().clone();
    assert!(
        seen.is_empty(),
        "an hour later with nothing changed: {seen:#?}"
    );
}
