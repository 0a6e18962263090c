//! What the stage waits for and asks of the published state: a condition
//! on the shared state (with [`STEP_DEADLINE`], failing early when a
//! consumer died unasked), a settled and balanced assignment, more records
//! processed; and the published document's owners and phases.

use std::time::Instant;

use super::super::controller::Shared;
use super::super::{DemoError, STREAM};
use super::Stage;
use super::conditions::{POLL, STEP_DEADLINE, every_owner_reading, wait_on};
use super::finish::read_logs;
use shardring_crds::ShardPhase;
use shardring_devkit::stream::reshard;

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
