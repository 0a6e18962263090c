//! The waits and questions on the shared state that need no stage (the
//! queue and partitioned demos use them too): a condition waited for until
//! [`STEP_DEADLINE`], failing early when a consumer died unasked; whether
//! every owner reads; and the published document's shards by phase.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::super::DemoError;
use super::super::controller::Shared;
use shardring_crds::ShardPhase;

/// The longest any one wait may take before the stage gives up.
pub const STEP_DEADLINE: Duration = Duration::from_secs(90);

/// How often a wait looks at its condition.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// Waits until `condition` holds on `shared` (checked every [`POLL`]),
/// failing after [`STEP_DEADLINE`] or as soon as a consumer died unasked.
pub(crate) async fn wait_on(
    shared: &Mutex<Shared>,
    what: &str,
    condition: impl Fn(&Shared) -> bool,
) -> Result<(), DemoError> {
    let started = Instant::now();
    loop {
        {
            let state = shared.lock();
            if let Some(problem) = state.problems.first() {
                return Err(DemoError::Consumer(problem.clone()));
            }
            if condition(&state) {
                return Ok(());
            }
        }
        if started.elapsed() >= STEP_DEADLINE {
            return Err(DemoError::Timeout {
                what: what.to_owned(),
                after: STEP_DEADLINE,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether every live pod that holds active shards has processed a record.
pub(crate) fn every_owner_reading(state: &Shared) -> bool {
    let Some(doc) = &state.cluster.published else {
        return false;
    };
    state.cluster.pods.values().all(|pod| {
        let holds = doc
            .pods
            .get(&pod.record.name)
            .is_some_and(|p| !p.active.is_empty());
        !holds
            || std::fs::metadata(&pod.record_log)
                .map(|m| m.len() > 0)
                .unwrap_or(false)
    })
}

/// The published document's shards by phase (for scenario assertions).
pub fn shards_in(state: &Shared, phase: ShardPhase) -> BTreeMap<String, Option<String>> {
    state
        .cluster
        .published
        .as_ref()
        .map(|doc| {
            doc.shards
                .iter()
                .filter(|(_, r)| r.state == phase)
                .map(|(id, r)| (id.clone(), r.owner.clone()))
                .collect()
        })
        .unwrap_or_default()
}
