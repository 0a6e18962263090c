//! The departed pods as the plan step reads them: for each pod that left the
//! API in the last [`RETENTION`], its uid and what its final object said of
//! its containers ([`Departure`]), and since when every departure was seen
//! ([`Departures::watched_since`]). The handoff step reads them to tell a pod
//! the kubelet stopped before confirming its deletion from one that was
//! force-deleted, or whose node stopped reporting, while its process may
//! still run (see `docs/handoff.md`, evidence `pod_stopped`). The memory that
//! records them from the pod watch is the operator's (runtime state); this
//! is the plain data it hands over.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::observation::Containers;

/// How long a departure is remembered. A process that outlived its pod
/// object (a force deletion) by more than this is assumed gone: longer than
/// any sensible `terminationGracePeriodSeconds` or `handoff.drainTimeout`.
pub const RETENTION: Duration = Duration::from_secs(600);

/// One pod that left the API, as its final object showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departure {
    /// Its uid (a pod of the same name created later has another).
    pub uid: String,
    /// When the watch reported it gone.
    pub at: Timestamp,
    /// What its final status said of its containers.
    pub containers: Containers,
    /// Whether it was bound to a node (`spec.nodeName`).
    pub scheduled: bool,
    /// Its creation timestamp.
    pub created: Option<Timestamp>,
    /// Whether the API server generated its name (`metadata.generateName`).
    pub generated_name: bool,
}

/// What the memory knows about one namespace's departed pods at one moment:
/// the plain data the (pure) plan step reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departures {
    /// Since when every departure was seen; `None`: no memory (nothing
    /// listed yet, a relist in progress, or a caller without a watch).
    pub watched_since: Option<Timestamp>,
    /// How long departures are kept: one older than this may be forgotten.
    pub retention: Duration,
    /// Per pod name, the remembered departures, oldest first.
    pub pods: BTreeMap<String, Vec<Departure>>,
}

impl Default for Departures {
    fn default() -> Self {
        Self {
            watched_since: None,
            retention: RETENTION,
            pods: BTreeMap::new(),
        }
    }
}

impl Departures {
    /// Whether no earlier pod of the same name as one created at `created`
    /// can have left unseen and still run: either the memory saw every
    /// departure of the last [`Self::retention`], or the pod was created
    /// longer ago than that (an earlier pod of its name left before it was
    /// created, so longer ago than the retention: assumed gone).
    pub fn covers(&self, created: Option<Timestamp>, now: Timestamp) -> bool {
        let horizon = horizon(now, self.retention);
        self.watched_since.is_some_and(|w| w <= horizon) || created.is_some_and(|c| c <= horizon)
    }
}

/// The time `retention` before `now`: what is older may be forgotten
/// (`Timestamp::MIN` when that lies before the representable range).
pub fn horizon(now: Timestamp, retention: Duration) -> Timestamp {
    SignedDuration::try_from(retention)
        .ok()
        .and_then(|d| now.checked_sub(d).ok())
        .unwrap_or(Timestamp::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn coverage_needs_the_whole_retention_or_an_old_pod() {
        let now = t(10_000);
        let mut seen = Departures {
            watched_since: Some(now - RETENTION),
            ..Default::default()
        };
        assert!(seen.covers(None, now));
        seen.watched_since = Some(now - RETENTION + Duration::from_secs(1));
        assert!(!seen.covers(Some(now - Duration::from_secs(5)), now));
        assert!(seen.covers(Some(now - RETENTION), now));
        seen.watched_since = None;
        assert!(!seen.covers(None, now));
        assert_eq!(horizon(Timestamp::MIN, RETENTION), Timestamp::MIN);
    }
}
