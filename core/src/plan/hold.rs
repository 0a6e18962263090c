//! The hold of a group's first publish (`rebalance.initialDelay`): while a
//! group has never published an assignment, every pod of the pool that
//! exists and is not terminating is waited for (pods not Ready yet, and
//! pods Ready but short of the pool's `minReadySeconds`), so pods started
//! together (a fresh install, a GitOps sync applying the pool, the group
//! and the Deployment at once) land in one balanced document instead of a
//! document for the first of them followed by paced optional moves onto
//! the rest (Kafka's `group.initial.rebalance.delay.ms` solves the same
//! problem).
//!
//! The hold is bounded: it counts from when the first pod became eligible
//! and lasts at most the initial delay; a pod that is Ready but becomes
//! eligible only after that bound is not waited for. Everything is derived
//! from the pods' Ready times and `now`, so an operator restarted during
//! the hold keeps the same deadline and nothing is stored.

use std::time::Duration;

use jiff::Timestamp;

use crate::observation::PodInfo;
use crate::pacing::add;

/// A first publish held back: whom it waits for, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hold {
    /// The pods waited for (not Ready yet, or Ready and eligible before
    /// the deadline), sorted by name.
    pub waiting_for: Vec<String>,
    /// How long until the next look: the next of them to become eligible,
    /// or the deadline (a pod turning Ready wakes the group by itself).
    pub next: Duration,
    /// The latest the publish can be held until.
    pub deadline: Timestamp,
}

impl Hold {
    /// The Ready condition's message while held.
    pub(crate) fn message(&self, min_ready: Duration) -> String {
        format!(
            "the first assignment waits for {} (not yet Ready, or Ready and eligible after minReadySeconds {}s) so that pods started together share one balanced publish; it is published by {} at the latest (rebalance.initialDelay)",
            self.waiting_for.join(", "),
            min_ready.as_secs(),
            self.deadline
        )
    }
}

/// Whether the first publish waits, given the pool's selected `pods`, its
/// `min_ready`, the spec's `initial_delay` and `now`. `None`: publish now
/// (no pod eligible yet is not a hold: nothing could be published).
pub(crate) fn first_publish_hold(
    pods: &[PodInfo],
    min_ready: Duration,
    initial_delay: Duration,
    now: Timestamp,
) -> Option<Hold> {
    if initial_delay.is_zero() {
        return None;
    }
    let candidates = pods
        .iter()
        .filter(|p| p.selected && p.deletion_timestamp.is_none());
    // When each Ready pod becomes eligible; without a Ready time a pod has
    // been Ready as long as the operator knows, so it is eligible already
    // and the first eligibility lies too far back to hold for.
    let mut first_eligible: Option<Timestamp> = None;
    let mut upcoming: Vec<(Option<Timestamp>, &str)> = Vec::new();
    for pod in candidates {
        if !pod.ready {
            upcoming.push((None, pod.name.as_str()));
            continue;
        }
        let at = add(pod.ready_since?, min_ready);
        if at <= now {
            first_eligible = Some(first_eligible.map_or(at, |f| f.min(at)));
        } else {
            upcoming.push((Some(at), pod.name.as_str()));
        }
    }
    let deadline = add(first_eligible?, initial_delay);
    if deadline <= now {
        return None;
    }
    let mut waiting: Vec<(Option<Timestamp>, &str)> = upcoming
        .into_iter()
        .filter(|(at, _)| at.is_none_or(|at| at <= deadline))
        .collect();
    if waiting.is_empty() {
        return None;
    }
    let next = waiting
        .iter()
        .filter_map(|(at, _)| *at)
        .min()
        .unwrap_or(deadline);
    waiting.sort_by(|a, b| a.1.cmp(b.1));
    Some(Hold {
        waiting_for: waiting
            .into_iter()
            .map(|(_, name)| name.to_owned())
            .collect(),
        next: next.duration_since(now).unsigned_abs(),
        deadline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }

    fn ready(name: &str, since_ms: i64) -> PodInfo {
        PodInfo {
            name: name.into(),
            selected: true,
            ready: true,
            ready_since: Some(t(since_ms)),
            ..PodInfo::default()
        }
    }

    const MIN_READY: Duration = Duration::from_secs(10);
    const DELAY: Duration = Duration::from_secs(5);

    #[test]
    fn waits_for_a_pod_a_moment_short_of_min_ready() {
        // a eligible at 10 s, b at 11 s: at 10.5 s the publish waits for b.
        let pods = [ready("a", 0), ready("b", 1_000)];
        let hold = first_publish_hold(&pods, MIN_READY, DELAY, t(10_500)).expect("held");
        assert_eq!(hold.waiting_for, ["b"]);
        assert_eq!(hold.next, Duration::from_millis(500));
        assert_eq!(hold.deadline, t(15_000));
        assert!(
            hold.message(MIN_READY).contains("b (not yet Ready"),
            "{}",
            hold.message(MIN_READY)
        );
        // Once b is eligible too, nothing is held.
        assert_eq!(first_publish_hold(&pods, MIN_READY, DELAY, t(11_000)), None);
    }

    #[test]
    fn never_waits_past_the_initial_delay() {
        // b becomes eligible 6 s after a: past the 5 s bound, not waited for.
        let pods = [ready("a", 0), ready("b", 6_000), ready("c", 2_000)];
        let hold = first_publish_hold(&pods, MIN_READY, DELAY, t(10_000)).expect("held for c");
        assert_eq!(hold.waiting_for, ["c"]);
        assert_eq!(first_publish_hold(&pods, MIN_READY, DELAY, t(12_000)), None);
    }

    #[test]
    fn nothing_is_held_without_delay_or_an_eligible_pod() {
        let pods = [ready("a", 0), ready("b", 1_000)];
        assert_eq!(
            first_publish_hold(&pods, MIN_READY, Duration::ZERO, t(10_500)),
            None
        );
        // Without minReadySeconds both are eligible at once: nothing to wait for.
        assert_eq!(
            first_publish_hold(&pods, Duration::ZERO, DELAY, t(1_500)),
            None
        );
        // No pod eligible yet: nothing could be published anyway.
        assert_eq!(first_publish_hold(&pods, MIN_READY, DELAY, t(9_000)), None);
        // A Ready pod without a Ready time is eligible since before anything
        // the operator knows: the bound has passed.
        let mut unknown = ready("a", 0);
        unknown.ready_since = None;
        assert_eq!(
            first_publish_hold(&[unknown, ready("b", 9_000)], MIN_READY, DELAY, t(10_000)),
            None
        );
    }

    /// A group of 16 static partitions over a pool with `minReadySeconds`
    /// 10, pods `a` and `b` Ready at 0 s and 1 s (eligible at 10 s and
    /// 11 s), nothing published yet, observed at `now_ms`.
    fn fresh_group(initial_delay: &str, now_ms: i64) -> crate::Observation {
        let mut obs = crate::fixtures::observation(16, vec![ready("a", 0), ready("b", 1_000)]);
        obs.group.spec.rebalance.initial_delay = initial_delay.into();
        obs.pool = Some(crate::fixtures::pool(10));
        obs.topology.read_at = Some(t(0));
        obs.now = t(now_ms);
        obs
    }

    fn condition(d: &crate::Decision, type_: &str) -> (String, String) {
        let c = crate::conditions::find(&d.status.conditions, type_).expect(type_);
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn pods_started_together_land_in_one_balanced_first_document() {
        use crate::conditions::{PROGRESSING, READY, reason};
        // At 10.5 s only a is eligible: the first publish waits for b.
        let held = crate::plan(&fresh_group("5s", 10_500));
        assert_eq!(held.document_write, None);
        assert!(held.annotation_writes.is_empty());
        assert_eq!(held.requeue_after, Duration::from_millis(500));
        let expected = ("False".to_owned(), reason::FIRST_PUBLISH_HELD.to_owned());
        assert_eq!(condition(&held, READY), expected);
        assert_eq!(condition(&held, PROGRESSING).1, reason::FIRST_PUBLISH_HELD);
        assert!(held.events.is_empty(), "{:?}", held.events);
        // At 11 s both are: one document, 8 shards each.
        let first = crate::plan(&fresh_group("5s", 11_000));
        let doc = first.document_write.expect("published").document;
        let loads: Vec<usize> = doc.pods.values().map(|p| p.active.len()).collect();
        assert_eq!(loads, [8, 8], "{:?}", doc.pods);
        // Without the hold, the first document goes to a alone, and b gets
        // its share only through paced optional moves.
        let unheld = crate::plan(&fresh_group("0s", 10_500));
        let doc = unheld.document_write.expect("published at once").document;
        assert_eq!(doc.pods.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn terminating_and_unselected_pods_are_not_waited_for_and_starting_ones_are() {
        let mut gone = ready("b", 1_000);
        gone.deletion_timestamp = Some(t(0));
        let mut other = ready("c", 1_000);
        other.selected = false;
        let pods = [ready("a", 0), gone.clone(), other.clone()];
        assert_eq!(first_publish_hold(&pods, MIN_READY, DELAY, t(10_500)), None);
        // A pod that exists and is not Ready yet is waited for, until the
        // deadline (it wakes the group when it turns Ready).
        let mut starting = ready("d", 1_000);
        starting.ready = false;
        let pods = [ready("a", 0), gone, other, starting];
        let hold = first_publish_hold(&pods, MIN_READY, DELAY, t(10_500)).expect("held for d");
        assert_eq!(hold.waiting_for, ["d"]);
        assert_eq!(hold.next, Duration::from_millis(4_500));
        assert_eq!(first_publish_hold(&pods, MIN_READY, DELAY, t(15_000)), None);
    }

    /// A fresh Deployment without `minReadySeconds`: its pods turn Ready a
    /// few hundred milliseconds apart. The first document waits for the
    /// ones still starting and puts the partitions on all of them.
    #[test]
    fn pods_turning_ready_hundreds_of_milliseconds_apart_share_the_first_document() {
        let not_yet = |name: &str| {
            let mut pod = ready(name, 0);
            pod.ready = false;
            pod.ready_since = None;
            pod
        };
        let mut obs = crate::fixtures::observation(24, Vec::new());
        obs.pool = Some(crate::fixtures::pool(0));
        obs.topology.read_at = Some(t(0));
        obs.pods = vec![ready("a", 0), not_yet("b"), not_yet("c")];
        obs.now = t(300);
        let held = crate::plan(&obs);
        assert_eq!(held.document_write, None, "held for b and c");
        obs.pods = vec![ready("a", 0), ready("b", 300), not_yet("c")];
        obs.now = t(600);
        assert_eq!(crate::plan(&obs).document_write, None, "held for c");
        obs.pods = vec![ready("a", 0), ready("b", 300), ready("c", 800)];
        obs.now = t(800);
        let doc = crate::plan(&obs)
            .document_write
            .expect("published")
            .document;
        let loads: Vec<usize> = doc.pods.values().map(|p| p.active.len()).collect();
        assert_eq!(loads, [8, 8, 8], "{:?}", doc.pods);
    }
}
