//! What the stage waits for and asks of the published state: a condition
//! on the shared state (with [`STEP_DEADLINE`], failing early when a
//! consumer died unasked), a settled and balanced assignment, more records
//! processed; and the published document's owners and phases.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::super::controller::Shared;
use super::super::{DemoError, STREAM};
use super::finish::read_logs;
use super::{STEP_DEADLINE, Stage};
use shardring_crds::ShardPhase;
use shardring_devkit::stream::reshard;

/// How often a wait looks at its condition.
const POLL: Duration = Duration::from_millis(100);

impl Stage {
    /// Waits until `condition` holds (checked every [`POLL`]), failing
    /// after [`STEP_DEADLINE`] or as soon as a consumer died unasked.
    pub async fn wait_for(
        &self,
        what: &str,
        condition: impl Fn(&Shared) -> bool,
    ) -> Result<(), DemoError> {
        wait_on(&self.shared, what, condition).await
    }

    /// Waits until the assignment is settled and balanced for the live pods
    /// and covers every shard ListShards reports open now, and every owner
    /// has read a record.
    pub async fn wait_settled(&self, what: &str) -> Result<(), DemoError> {
        let open = reshard::open_shards(&self.kinesis, STREAM).await?;
        self.wait_for(what, |s| {
            s.settled() && s.load_spread() <= 1 && every_owner_reading(s) && covers(s, &open)
        })
        .await
    }

    /// Waits until `records` more records have been processed than now.
    pub async fn traffic(&self, records: usize) -> Result<(), DemoError> {
        let logs = || self.state().cluster.record_logs.clone();
        let start = read_logs(&logs())?.len();
        let started = Instant::now();
        loop {
            let now = read_logs(&logs())?.len();
            if now >= start + records {
                return Ok(());
            }
            if started.elapsed() >= STEP_DEADLINE {
                return Err(DemoError::Timeout {
                    what: format!("{records} more records processed ({} so far)", now - start),
                    after: STEP_DEADLINE,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Readable (active or revoking) shards in the published document.
    pub(crate) fn readable_shards(&self) -> usize {
        self.state().cluster.published.as_ref().map_or(0, |doc| {
            doc.shards
                .values()
                .filter(|r| r.state == ShardPhase::Active || r.state == ShardPhase::Revoking)
                .count()
        })
    }

    /// The published owner of `shard`, if any.
    pub(crate) fn owner_of(&self, shard: &str) -> Option<String> {
        let state = self.state();
        let doc = state.cluster.published.as_ref()?;
        doc.shards.get(shard)?.owner.clone()
    }
}

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

/// Whether every shard of `open` is active in the published document.
fn covers(state: &Shared, open: &[String]) -> bool {
    state.cluster.published.as_ref().is_some_and(|doc| {
        open.iter().all(|id| {
            doc.shards
                .get(id)
                .is_some_and(|r| r.state == ShardPhase::Active)
        })
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
