//! The static-partition worker's promises, against a scripted handler and
//! views offered by hand: a reader starts from the handed-over checkpoint,
//! the release is acknowledged with the last checkpoint only after the
//! reader stopped, and nothing is read once the view revokes a partition.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardring_crds::assignment::PodView;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::view::endpoint::{EndpointClient, EndpointConfig, OutboxEntry};
use crate::view::{self, ViewPublisher};

/// What the handler saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Opened(String, Option<String>),
    Batch(String, Instant),
    Closed(String, Option<String>),
}

/// Reads an endless partition: each batch is one message, the checkpoint
/// its number. While `hold` is set, a batch waits for `gate` once it began
/// (announcing itself on `entered`).
#[derive(Default)]
struct Script {
    seen: Mutex<Vec<Seen>>,
    hold: Mutex<bool>,
    gate: Notify,
    entered: Notify,
}

impl Script {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }

    fn note(&self, seen: Seen) {
        self.seen.lock().push(seen);
    }
}

impl PartitionHandler for Script {
    async fn process(
        &self,
        context: &PartitionContext,
        checkpoint: Option<&str>,
    ) -> anyhow::Result<Option<String>> {
        self.note(Seen::Batch(context.partition.clone(), Instant::now()));
        let next = checkpoint.map_or(0, |c| c.parse::<u64>().unwrap() + 1);
        if *self.hold.lock() {
            self.entered.notify_one();
            self.gate.notified().await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(Some(next.to_string()))
    }

    fn opened(&self, context: &PartitionContext, checkpoint: Option<&str>) {
        self.note(Seen::Opened(
            context.partition.clone(),
            checkpoint.map(str::to_owned),
        ));
    }

    fn closed(&self, context: &PartitionContext, checkpoint: Option<&str>) {
        self.note(Seen::Closed(
            context.partition.clone(),
            checkpoint.map(str::to_owned),
        ));
    }
}

fn pod_view(epoch: u64, active: &[&str], revoking: &[&str]) -> PodView {
    PodView {
        epoch,
        active: active.iter().map(|s| (*s).to_owned()).collect(),
        standby: Vec::new(),
        revoking: revoking.iter().map(|s| (*s).to_owned()).collect(),
        held: Vec::new(),
    }
}

struct Harness {
    publisher: ViewPublisher,
    handover: watch::Sender<EndpointStatus>,
    script: Arc<Script>,
    acks: ReleaseSender,
    shutdown: CancellationToken,
    worker: tokio::task::JoinHandle<PartitionReport>,
}

/// A worker whose acknowledgements stay in the outbox: the endpoint it
/// would send them to does not listen.
fn harness(handed_over: &[(&str, &str)]) -> Harness {
    let (publisher, assignment) = view::channel();
    let status = EndpointStatus {
        checkpoints: handed_over
            .iter()
            .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        ..EndpointStatus::default()
    };
    let (handover, receiver) = watch::channel(status);
    let client = EndpointClient::new(EndpointConfig {
        token_file: "/nonexistent/token".into(),
        ca_file: "/nonexistent/ca.crt".into(),
        ..EndpointConfig::new("https://127.0.0.1:9")
    })
    .unwrap();
    let acks = ReleaseSender::spawn(client, "default", "queues", assignment.clone());
    let script = Arc::new(Script::default());
    let config = PartitionConfig {
        tick: Duration::from_millis(20),
        idle: Duration::from_millis(5),
        drain_deadline: Duration::from_secs(5),
        stop_timeout: Duration::from_millis(200),
        ..PartitionConfig::new("pod-a")
    };
    let worker = PartitionWorker::new(assignment, receiver, script.clone(), config);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let worker = worker.with_release_acks(acks.clone());
    let worker =
        tokio::spawn(async move { worker.run(async move { stop.cancelled().await }).await });
    Harness {
        publisher,
        handover,
        script,
        acks,
        shutdown,
        worker,
    }
}

/// Waits until `done` holds (each 5 ms, at most 5 s).
async fn until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(5), "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn batches(seen: &[Seen], partition: &str) -> usize {
    seen.iter()
        .filter(|s| matches!(s, Seen::Batch(p, _) if p == partition))
        .count()
}

fn outbox(acks: &ReleaseSender) -> Vec<(String, u64, Option<String>)> {
    acks.outbox()
        .into_iter()
        .map(|OutboxEntry { request, .. }| (request.shard, request.epoch, request.checkpoint))
        .collect()
}

#[tokio::test]
async fn readers_start_from_the_handed_over_checkpoint_else_the_handlers_start() {
    let h = harness(&[("q-0", "41")]);
    h.publisher.offer(pod_view(3, &["q-0", "q-1"], &[]));
    let script = h.script.clone();
    until("both partitions read", || {
        let seen = script.seen();
        batches(&seen, "q-0") > 0 && batches(&seen, "q-1") > 0
    })
    .await;
    let seen = h.script.seen();
    assert!(seen.contains(&Seen::Opened("q-0".into(), Some("41".into()))));
    assert!(seen.contains(&Seen::Opened("q-1".into(), None)));
    // The first batch of q-0 continued after 41.
    h.publisher.offer(pod_view(4, &["q-1"], &["q-0"]));
    until("q-0 acknowledged", || !outbox(&h.acks).is_empty()).await;
    let (_, _, checkpoint) = outbox(&h.acks).remove(0);
    let last: u64 = checkpoint.unwrap().parse().unwrap();
    assert!(last >= 42, "q-0 went on from 41, got to {last}");
    h.shutdown.cancel();
    h.publisher.offer(pod_view(5, &[], &["q-1"]));
    let report = h.worker.await.unwrap();
    assert_eq!(report.started, 2);
    assert_eq!(report.acked, 2, "{report:?}");
    assert!(!report.drain_deadline_passed);
    drop(h.handover);
}

#[tokio::test]
async fn the_release_is_acknowledged_with_the_last_checkpoint_only_after_the_reader_stopped() {
    let h = harness(&[]);
    h.publisher.offer(pod_view(1, &["q-0"], &[]));
    let script = h.script.clone();
    until("a few batches", || batches(&script.seen(), "q-0") >= 3).await;
    // The next batch stays in hand until the gate opens.
    *h.script.hold.lock() = true;
    h.script.entered.notified().await;
    h.publisher.offer(pod_view(2, &[], &["q-0"]));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        outbox(&h.acks).is_empty(),
        "acknowledged while a batch was in hand"
    );
    assert!(
        !h.script
            .seen()
            .iter()
            .any(|s| matches!(s, Seen::Closed(..))),
        "the reader stopped before its batch finished"
    );
    *h.script.hold.lock() = false;
    h.script.gate.notify_one();
    until("the acknowledgement", || !outbox(&h.acks).is_empty()).await;
    let seen = h.script.seen();
    let Some(Seen::Closed(_, Some(closed_at))) = seen.last().cloned() else {
        panic!("the reader did not close last: {seen:?}");
    };
    // Checkpoints count batches from 0: the batch in hand is the last one.
    let handled = batches(&seen, "q-0");
    assert_eq!(closed_at, (handled - 1).to_string());
    assert_eq!(
        outbox(&h.acks),
        vec![("q-0".to_owned(), 2, Some(closed_at))],
        "one acknowledgement, at the revoking epoch, with the last checkpoint"
    );
    h.shutdown.cancel();
    let report = h.worker.await.unwrap();
    assert_eq!((report.stopped, report.acked), (1, 1));
}

#[tokio::test]
async fn nothing_is_read_that_the_newest_view_does_not_list_active() {
    let h = harness(&[]);
    // Standby and revoking partitions are never opened.
    let mut standby = pod_view(1, &["q-0"], &["q-9"]);
    standby.standby = vec!["q-8".into()];
    h.publisher.offer(standby);
    let script = h.script.clone();
    until("q-0 read", || batches(&script.seen(), "q-0") >= 5).await;
    h.publisher.offer(pod_view(2, &[], &["q-0"]));
    let revoked = Instant::now();
    until("q-0 closed", || {
        script
            .seen()
            .iter()
            .any(|s| matches!(s, Seen::Closed(p, _) if p == "q-0"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after: Vec<_> = h
        .script
        .seen()
        .into_iter()
        .filter(|s| matches!(s, Seen::Batch(p, at) if p == "q-0" && *at > revoked))
        .collect();
    assert!(after.is_empty(), "read after the revoke: {after:?}");
    assert!(
        !h.script.seen().iter().any(|s| matches!(
            s,
            Seen::Opened(p, _) | Seen::Batch(p, _) if p == "q-8" || p == "q-9"
        )),
        "a standby or revoking partition was read"
    );
    // An older epoch that lists it active again is ignored.
    assert!(!h.publisher.offer(pod_view(1, &["q-0"], &[])));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !h.script
            .seen()
            .iter()
            .any(|s| matches!(s, Seen::Batch(p, at) if p == "q-0" && *at > revoked)),
        "read at an older epoch"
    );
    h.shutdown.cancel();
    h.worker.await.unwrap();
}

#[tokio::test]
async fn shutdown_reads_on_until_revoked_then_acknowledges() {
    let h = harness(&[]);
    h.publisher.offer(pod_view(1, &["q-0", "q-1"], &[]));
    let script = h.script.clone();
    until("both read", || {
        let seen = script.seen();
        batches(&seen, "q-0") > 0 && batches(&seen, "q-1") > 0
    })
    .await;
    h.shutdown.cancel();
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(!h.worker.is_finished(), "left before being revoked");
    let before = batches(&h.script.seen(), "q-1");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(
        batches(&h.script.seen(), "q-1") > before,
        "stopped reading while draining"
    );
    h.publisher.offer(pod_view(2, &[], &["q-0", "q-1"]));
    let report = h.worker.await.unwrap();
    assert_eq!((report.stopped, report.acked), (2, 2), "{report:?}");
    let acked: Vec<_> = outbox(&h.acks)
        .into_iter()
        .map(|(p, e, _)| (p, e))
        .collect();
    assert_eq!(acked, vec![("q-0".into(), 2), ("q-1".into(), 2)]);
}
