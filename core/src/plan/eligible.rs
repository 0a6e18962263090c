//! Which pods may receive shards: the rule the plan's inputs and the
//! identity of returning pods share.

use std::time::Duration;

use jiff::Timestamp;

use crate::observation::PodInfo;

/// Whether a pod may receive shards at `now`: Ready for the pool's
/// `minReadySeconds` and not terminating.
pub fn eligible(pod: &PodInfo, min_ready: Duration, now: Timestamp) -> bool {
    pod.selected && pod.deletion_timestamp.is_none() && ready_for(pod, min_ready, now)
}

pub(super) fn ready_for(pod: &PodInfo, min_ready: Duration, now: Timestamp) -> bool {
    if !pod.ready {
        return false;
    }
    if min_ready.is_zero() {
        return true;
    }
    // Without a transition time the pod has been Ready as long as we know.
    pod.ready_since.is_none_or(|since| {
        since
            .as_millisecond()
            .saturating_add(i64::try_from(min_ready.as_millis()).unwrap_or(i64::MAX))
            <= now.as_millisecond()
    })
}
