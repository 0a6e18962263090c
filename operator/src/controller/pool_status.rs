//! The ConsumerPool status writes ([`PoolStatusWrites`]): a status equal to
//! the one last written is not written; one whose conditions stay as they
//! are (only counts changed: a pod event, a group's new document) is
//! written at most once per [`STATUS_HOLD`], by a timer of the pool's own
//! once it is due, with the newest such status held until then.
//!
//! Why a timer of the pool's, not a group's requeue: a group requeued to
//! write held counts runs a whole reconcile for them, a plan over all its
//! shards (at 20,000 shards 10 to 20 ms) that writes nothing else, and a
//! pod event that comes meanwhile waits behind it: a pod's creation holds
//! the pool's new counts, and the requeue may come due as the pod turns
//! Ready.
//!
//! A pool's statuses are computed and written one at a time (a lock per
//! pool, held from the computation across the request): a status is
//! computed from the documents every group of the pool has written so far,
//! so the one computed last is the newest, and it is the one left written
//! or held when several groups of a pool reconcile at once, and the timer
//! besides.
//!
//! The timers end with the controller ([`PoolStatusWrites::stop`]): one
//! still waiting writes nothing, one writing is waited for, so a stopping
//! leader's last write goes out before it gives its Lease up.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::groups::STATUS_HOLD;
use crate::crds::{ConsumerPool, ConsumerPoolStatus};
use crate::runtime::leader::{LeaderGate, may_write};

/// Field manager of the pool status writes.
const POOL_MANAGER: &str = "shardring-pool";

/// A pool: its namespace and name.
pub(crate) type PoolKey = (String, String);

/// Each pool's status writes. Cheap to clone: clones share one table and
/// its timers.
#[derive(Clone, Default)]
pub(crate) struct PoolStatusWrites {
    pools: Arc<Mutex<HashMap<PoolKey, PoolWrites>>>,
    /// The timers of held statuses.
    timers: TaskTracker,
    /// Cancelled by [`Self::stop`].
    stopped: CancellationToken,
}

/// One pool's: what was written, what waits, and the turn of its writes.
#[derive(Default)]
struct PoolWrites {
    /// Held by a write of the pool's status across its request.
    turn: Arc<tokio::sync::Mutex<()>>,
    written: Option<Written>,
    held: Option<ConsumerPoolStatus>,
    /// A timer is set for the held status.
    timer_set: bool,
}

/// A status as last written, and when.
struct Written {
    status: ConsumerPoolStatus,
    at: Instant,
}

/// What to do with a status offered for writing.
enum Verdict {
    /// It is the one written.
    Nothing,
    /// Held for the timer; `Some`: no timer was set, set one for then.
    Held(Option<Duration>),
    /// Written now.
    Write,
}

impl PoolStatusWrites {
    /// The conditions and load spread of the status last written to `pool`
    /// by this replica, if any.
    pub(crate) fn last_written(&self, pool: &PoolKey) -> Option<(Vec<Condition>, Option<String>)> {
        let pools = self.pools.lock();
        let written = &pools.get(pool)?.written.as_ref()?.status;
        Some((written.conditions.clone(), written.load_spread.clone()))
    }

    /// Computes `pool`'s status (`status`, given the pool's turn) and
    /// writes it unless it is the one last written (server-side apply of
    /// the status subresource, its own field manager). One whose
    /// conditions stay as they are is held until [`STATUS_HOLD`] after the
    /// pool's last write and then written by a timer, unless one computed
    /// later replaced it. Best effort: a failure is logged, and the next
    /// group's reconcile computes the status again.
    pub(crate) async fn publish(
        &self,
        client: &Client,
        leader: &LeaderGate,
        pool: &PoolKey,
        status: impl FnOnce() -> ConsumerPoolStatus,
    ) {
        let turn = self.turn_of(pool);
        let _turn = turn.lock().await;
        let status = status();
        let now = Instant::now();
        match self.verdict(pool, &status, now) {
            Verdict::Nothing | Verdict::Held(None) => {}
            Verdict::Held(Some(after)) => {
                let (writes, client, leader, pool) =
                    (self.clone(), client.clone(), leader.clone(), pool.clone());
                self.timers.spawn(async move {
                    writes.flush_after(after, &client, &leader, &pool).await;
                });
            }
            Verdict::Write => self.write(client, pool, status, now).await,
        }
    }

    /// Ends the timers, once the controller has stopped: those still
    /// waiting write nothing, and a write on its way is waited for.
    pub(crate) async fn stop(&self) {
        self.stopped.cancel();
        self.timers.close();
        self.timers.wait().await;
    }

    /// The lock that orders `pool`'s writes.
    fn turn_of(&self, pool: &PoolKey) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(&self.pools.lock().entry(pool.clone()).or_default().turn)
    }

    /// What to do with `status` for `pool` at `now`, holding it when it
    /// waits.
    fn verdict(&self, pool: &PoolKey, status: &ConsumerPoolStatus, now: Instant) -> Verdict {
        let mut pools = self.pools.lock();
        let writes = pools.entry(pool.clone()).or_default();
        let Some(written) = &writes.written else {
            return Verdict::Write;
        };
        if written.status == *status {
            writes.held = None;
            return Verdict::Nothing;
        }
        let left = STATUS_HOLD
            .checked_sub(now.duration_since(written.at))
            .filter(|left| !left.is_zero());
        match left {
            Some(left) if same_conditions(&written.status, status) => {
                writes.held = Some(status.clone());
                let set = !std::mem::replace(&mut writes.timer_set, true);
                Verdict::Held(set.then_some(left))
            }
            _ => {
                writes.held = None;
                Verdict::Write
            }
        }
    }

    /// The timer of `pool`'s held status: after `after`, writes the status
    /// held then (if any, and while this replica may write), or waits
    /// again when a write since made it not due yet.
    async fn flush_after(
        &self,
        mut after: Duration,
        client: &Client,
        leader: &LeaderGate,
        pool: &PoolKey,
    ) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(after) => {}
                () = self.stopped.cancelled() => return,
            }
            let turn = self.turn_of(pool);
            let _turn = turn.lock().await;
            let now = Instant::now();
            let held = {
                let mut pools = self.pools.lock();
                let Some(writes) = pools.get_mut(pool) else {
                    return;
                };
                let not_due = writes
                    .written
                    .as_ref()
                    .and_then(|w| STATUS_HOLD.checked_sub(now.duration_since(w.at)))
                    .filter(|left| !left.is_zero() && writes.held.is_some());
                if let Some(left) = not_due {
                    after = left;
                    continue;
                }
                writes.timer_set = false;
                writes.held.take()
            };
            if let Some(held) = held
                && may_write(leader)
                && !self.stopped.is_cancelled()
            {
                self.write(client, pool, held, now).await;
            }
            return;
        }
    }

    /// Writes `status` to `pool` and remembers it as written at `now`.
    async fn write(
        &self,
        client: &Client,
        pool: &PoolKey,
        status: ConsumerPoolStatus,
        now: Instant,
    ) {
        let (namespace, name) = pool;
        let body = serde_json::json!({
            "apiVersion": ConsumerPool::api_version(&()),
            "kind": ConsumerPool::kind(&()),
            "status": status,
        });
        let api: Api<ConsumerPool> = Api::namespaced(client.clone(), namespace);
        let params = PatchParams::apply(POOL_MANAGER).force();
        match api.patch_status(name, &params, &Patch::Apply(&body)).await {
            Ok(_) => {
                let mut pools = self.pools.lock();
                let writes = pools.entry(pool.clone()).or_default();
                writes.written = Some(Written { status, at: now });
            }
            Err(error) => {
                tracing::warn!(%error, pool = %name, "cannot write the ConsumerPool status");
            }
        }
    }
}

/// Whether the two statuses have the same conditions (type, status and
/// reason; a message or a time alone is no change of condition).
fn same_conditions(a: &ConsumerPoolStatus, b: &ConsumerPoolStatus) -> bool {
    let kinds = |s: &ConsumerPoolStatus| -> Vec<(String, String, String)> {
        s.conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect()
    };
    kinds(a) == kinds(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use shardring_devkit::apiserver::{MockApiServer, MockOptions};
    use shardring_devkit::fixtures;
    use tokio::sync::watch;

    const NS: &str = "held";

    fn counts(pods: u64) -> impl FnOnce() -> ConsumerPoolStatus {
        move || ConsumerPoolStatus {
            pods,
            ..ConsumerPoolStatus::default()
        }
    }

    /// A mock API server holding pool `p`, a client of it, the writes
    /// under test and the pool's key.
    async fn pool_on_a_mock() -> (MockApiServer, Client, PoolStatusWrites, PoolKey) {
        let mock = MockApiServer::start(MockOptions::default()).await;
        mock.create_many(fixtures::crds());
        mock.create_many(vec![fixtures::namespace(NS), fixtures::pool(NS, "p", "c")]);
        let client = mock.client().await;
        let pool = (NS.to_owned(), "p".to_owned());
        (mock, client, PoolStatusWrites::default(), pool)
    }

    fn stored_pods(mock: &MockApiServer) -> Option<u64> {
        let pool = mock.get("shardring.io/v1alpha1", "ConsumerPool", Some(NS), "p")?;
        pool["status"]["pods"].as_u64()
    }

    fn pool_writes(mock: &MockApiServer) -> u64 {
        mock.count("PATCH", "/consumerpools/p/status")
    }

    /// Polls until the mock has taken `writes` status writes, failing after
    /// five seconds (a held status is due within one).
    async fn until_written(mock: &MockApiServer, writes: u64) {
        let started = Instant::now();
        while pool_writes(mock) < writes {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{writes} pool status writes never came"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A burst of counts is one write at once and one by the timer, once
    /// due, of the counts computed last; the status just written, computed
    /// again, is not written; a change of condition is written at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_counts_is_written_once_when_due_and_a_new_condition_at_once() {
        let (mock, client, writes, pool) = pool_on_a_mock().await;
        let written = Instant::now();
        writes.publish(&client, &None, &pool, counts(3)).await;
        assert_eq!((pool_writes(&mock), stored_pods(&mock)), (1, Some(3)));
        for pods in [4, 6, 5] {
            writes.publish(&client, &None, &pool, counts(pods)).await;
        }
        assert_eq!(
            pool_writes(&mock),
            1,
            "counts alone wait for the pool's timer"
        );
        until_written(&mock, 2).await;
        assert!(
            written.elapsed() >= STATUS_HOLD,
            "written {:?} after the last write",
            written.elapsed()
        );
        assert_eq!(stored_pods(&mock), Some(5), "the counts computed last");
        writes.publish(&client, &None, &pool, counts(5)).await;
        let degraded = || {
            let mut status = counts(5)();
            status.conditions.push(Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "NoEligiblePods".into(),
                message: String::new(),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            });
            status
        };
        writes.publish(&client, &None, &pool, degraded).await;
        assert_eq!(pool_writes(&mock), 3, "a new condition is written at once");
        tokio::time::sleep(STATUS_HOLD + Duration::from_millis(300)).await;
        assert_eq!(pool_writes(&mock), 3, "nothing was left held");
    }

    /// Statuses computed by reconciles at once go out one at a time, each
    /// computed in its turn: the one computed last is the one left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statuses_offered_at_once_are_computed_in_turn_and_the_last_is_left() {
        let (mock, client, writes, pool) = pool_on_a_mock().await;
        let computed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let offers = (0..8).map(|_| {
            let (writes, client, pool, computed) = (
                writes.clone(),
                client.clone(),
                pool.clone(),
                Arc::clone(&computed),
            );
            tokio::spawn(async move {
                let status = move || {
                    let n = computed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    counts(10 + n)()
                };
                writes.publish(&client, &None, &pool, status).await;
            })
        });
        for offered in futures::future::join_all(offers).await {
            offered.unwrap();
        }
        until_written(&mock, 2).await;
        assert_eq!(stored_pods(&mock), Some(17), "the status computed last");
        tokio::time::sleep(STATUS_HOLD + Duration::from_millis(300)).await;
        assert_eq!(pool_writes(&mock), 2, "one write at once, one when due");
    }

    /// Counts held when the controller stops are not written, and the stop
    /// does not wait for them to come due.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_controllers_held_counts_are_not_written() {
        let (mock, client, writes, pool) = pool_on_a_mock().await;
        writes.publish(&client, &None, &pool, counts(3)).await;
        writes.publish(&client, &None, &pool, counts(4)).await;
        let stopping = Instant::now();
        writes.stop().await;
        assert!(
            stopping.elapsed() < STATUS_HOLD / 2,
            "the stop waited for the timer"
        );
        tokio::time::sleep(STATUS_HOLD + Duration::from_millis(300)).await;
        assert_eq!((pool_writes(&mock), stored_pods(&mock)), (1, Some(3)));
    }

    /// A replica that stopped leading while counts were held writes none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_that_no_longer_leads_writes_no_held_counts() {
        let (mock, client, writes, pool) = pool_on_a_mock().await;
        let (leads, leader) = watch::channel(true);
        let leader = Some(leader);
        writes.publish(&client, &leader, &pool, counts(3)).await;
        writes.publish(&client, &leader, &pool, counts(4)).await;
        leads.send_replace(false);
        tokio::time::sleep(STATUS_HOLD + Duration::from_millis(500)).await;
        assert_eq!(pool_writes(&mock), 1);
        assert_eq!(stored_pods(&mock), Some(3));
    }
}
