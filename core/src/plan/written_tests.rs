//! The annotations a plan memory found written never hide a write: over a
//! sequence of plans with one memory (a no-op, an annotation changed by
//! someone else to another pod's lists or to junk, pods joining and
//! leaving, a document that was never published, a pod that came back
//! under its name with the text it had), every decision equals the one a
//! plan without memory makes, and the memory was used.

use crate::fixtures::{self, apply};
use crate::observation::Observation;
use crate::plan::{PlanMemory, plan, plan_with};

/// Plans `obs` with `memory`: the decision of a plan without memory.
fn planned(obs: &Observation, memory: &mut PlanMemory) -> crate::plan::Decision {
    let (decision, _) = plan_with(obs, memory);
    assert_eq!(decision, plan(obs));
    decision
}

#[test]
fn found_written_never_hides_a_write() {
    let mut memory = PlanMemory::default();
    let mut obs = fixtures::observation(40, fixtures::pods(6));
    // Balancing moves start at once (the default waits 30 s).
    obs.group.spec.rebalance = shardring_crds::fixtures::rebalance("0s");
    let first = planned(&obs, &mut memory);
    assert_eq!(first.annotation_writes.len(), 6);
    obs = apply(obs, first);
    // Nothing changed: no write, and every annotation was found written.
    let noop = planned(&obs, &mut memory);
    assert!(noop.annotation_writes.is_empty());
    assert_eq!(memory.written.len(), 6);
    // Still nothing: now taken from the memory.
    obs = apply(obs, noop);
    assert!(planned(&obs, &mut memory).annotation_writes.is_empty());

    // Someone wrote another pod's view on consumer-1, and junk on
    // consumer-2: both are written back.
    let other = obs.pods[3].annotation.clone();
    obs.pods[1].annotation = other;
    obs.pods[2].annotation = Some("{\"epoch\":1}".into());
    let mended = planned(&obs, &mut memory);
    let names: Vec<&str> = mended
        .annotation_writes
        .iter()
        .map(|w| w.pod.as_str())
        .collect();
    assert_eq!(names, ["consumer-1", "consumer-2"]);
    obs = apply(obs, mended);

    // A pod joins: the pods whose lists change get a view though their
    // text did not change.
    obs.pods.push(fixtures::pod_info("consumer-6"));
    let joined = planned(&obs, &mut memory);
    assert!(joined.document_write.is_some());
    assert!(
        joined.annotation_writes.len() > 1,
        "{:?}",
        joined.annotation_writes
    );

    // That document was never published (its write failed): planned again
    // from the published one, with the same annotations.
    let again = planned(&obs, &mut memory);
    assert_eq!(again.annotation_writes, joined.annotation_writes);
    obs = apply(obs, again);
    assert!(planned(&obs, &mut memory).annotation_writes.is_empty());

    // A pod starts terminating: its shards are revoked, which its view
    // shows though its text did not change.
    obs.pods[0].deletion_timestamp = Some(obs.now);
    let left = planned(&obs, &mut memory);
    let names: Vec<&str> = left
        .annotation_writes
        .iter()
        .map(|w| w.pod.as_str())
        .collect();
    assert_eq!(names, ["consumer-0"]);
    obs = apply(obs, left);
    assert!(planned(&obs, &mut memory).annotation_writes.is_empty());
}
