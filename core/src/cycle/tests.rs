//! The cycle's contract with a recording target: the writes of a first
//! publish go out in the order document → annotations → status → Events,
//! and the first failed write stops the cycle with nothing after it written.

use jiff::Timestamp;

use super::{Apply, Observe, Observed, Step, cycle, ready};
use crate::crds::ShardGroupStatus;
use crate::crds::fixtures;
use crate::document::AnnotationWrite;
use crate::events::EventNote;
use crate::observation::{
    Containers, LeaseObservation, Observation, PodInfo, Published, PublishedVersion,
    TopologyObservation,
};
use crate::plan::DocumentWrite;
use crate::topology::Topology;

fn now() -> Timestamp {
    "2026-11-21T12:00:00Z".parse().unwrap()
}

/// A group of four static shards over two ready pods, never published.
fn first_publish(now: Timestamp) -> Observation {
    let group = fixtures::static_group("prod", "orders", "consumers", 4, "orders-{index}");
    let pool = fixtures::pool("prod", "consumers", &[], 0);
    let partitions = group.spec.source.named_partitions().expect("static");
    let pod = |name: &str| PodInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        selected: true,
        ready: true,
        ready_since: Some(now),
        node_name: Some("node-1".into()),
        containers: Containers::Running,
        created: Some(now),
        ..Default::default()
    };
    Observation {
        group,
        pool: Some(pool),
        pods: vec![pod("a"), pod("b")],
        topology: TopologyObservation {
            source: "static:4".into(),
            last_good: Some(std::sync::Arc::new(Topology::of_partitions(partitions))),
            read_at: Some(now),
            ..Default::default()
        },
        published: Published::Missing,
        leases: LeaseObservation::NotConfigured,
        departed: Default::default(),
        releases: Default::default(),
        loads: Default::default(),
        now,
        pool_share: Default::default(),
        stateful_sets: Default::default(),
    }
}

/// Observes [`first_publish`] and records every call; the write of step
/// `fail` fails.
struct Recorder {
    fail: Option<Step>,
    observed_at: Option<Timestamp>,
    planned: bool,
    calls: Vec<Step>,
    base: Option<PublishedVersion>,
}

impl Recorder {
    fn failing(fail: Option<Step>) -> Self {
        Self {
            fail,
            observed_at: None,
            planned: false,
            calls: Vec::new(),
            base: None,
        }
    }

    fn write(&mut self, step: Step) -> Result<(), String> {
        assert!(self.planned, "{step:?} before the plan was announced");
        self.calls.push(step);
        if self.fail == Some(step) {
            Err(format!("{step:?} failed"))
        } else {
            Ok(())
        }
    }
}

impl Observe for Recorder {
    async fn observe(&mut self, now: Timestamp) -> Observed {
        self.observed_at = Some(now);
        Observed {
            observation: first_publish(now),
            published: PublishedVersion::At("7".into()),
        }
    }
}

impl Apply for Recorder {
    type Error = String;
    type Receipt = u64;

    async fn planned(&mut self, _: &crate::plan::Decision) {
        self.planned = true;
    }

    async fn document(
        &mut self,
        write: &DocumentWrite,
        base: &PublishedVersion,
    ) -> Result<u64, String> {
        self.base = Some(base.clone());
        self.write(Step::Document).map(|()| write.document.epoch)
    }

    async fn annotations(&mut self, writes: &[AnnotationWrite]) -> Result<(), String> {
        assert_eq!(writes.len(), 2, "one per pod");
        self.write(Step::Annotations)
    }

    async fn status(&mut self, status: &ShardGroupStatus) -> Result<(), String> {
        assert_eq!(status.epoch, 1);
        self.write(Step::Status)
    }

    async fn events(&mut self, events: &[EventNote]) {
        assert!(!events.is_empty());
        // Best effort: the recorder's failure would be logged, not returned.
        let _ = self.write(Step::Events);
    }

    async fn serve(&mut self, decision: &crate::plan::Decision, document: Option<&u64>) {
        assert!(decision.document_write.is_some());
        assert_eq!(document, Some(&1), "the document write's receipt");
        let _ = self.write(Step::Serve);
    }
}

const ALL: [Step; 5] = [
    Step::Document,
    Step::Annotations,
    Step::Status,
    Step::Events,
    Step::Serve,
];

#[test]
fn a_cycle_writes_document_then_annotations_then_status_then_events() {
    let mut target = Recorder::failing(None);
    let done = ready(cycle(&mut target, now()));
    assert_eq!(
        target.observed_at,
        Some(now()),
        "observed at the caller's time"
    );
    assert_eq!(target.calls, ALL);
    assert_eq!(done.applied.steps, ALL);
    assert_eq!(
        done.applied.document,
        Some(1),
        "the document write's receipt"
    );
    assert_eq!(
        target.base,
        Some(PublishedVersion::At("7".into())),
        "conditioned on what was observed"
    );
    assert!(done.stopped.is_none());
    let (decision, _) = done.into_result().expect("nothing failed");
    assert_eq!(decision.status.epoch, 1);
}

#[test]
fn a_failed_write_stops_the_cycle_before_anything_after_it() {
    for (i, fail) in [Step::Document, Step::Annotations, Step::Status]
        .into_iter()
        .enumerate()
    {
        let mut target = Recorder::failing(Some(fail));
        let done = ready(cycle(&mut target, now()));
        assert_eq!(target.calls, ALL[..=i], "{fail:?}: tried up to the failure");
        assert_eq!(
            done.applied.steps,
            ALL[..i],
            "{fail:?}: completed before it"
        );
        let stopped = done.stopped.as_ref().expect("stopped");
        assert_eq!(stopped.step, fail);
        assert_eq!(stopped.error, format!("{fail:?} failed"));
        // The decision is there all the same.
        assert!(done.decision.document_write.is_some());
        assert_eq!(
            done.into_result().map(|_| ()),
            Err(format!("{fail:?} failed"))
        );
    }
}

#[test]
fn a_failed_event_does_not_fail_the_cycle() {
    let mut target = Recorder::failing(Some(Step::Events));
    let done = ready(cycle(&mut target, now()));
    assert_eq!(target.calls, ALL);
    assert!(done.stopped.is_none());
}
