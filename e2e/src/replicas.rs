//! Two in-process operator replicas with leader election, for the scenario
//! that kills the leader: each replica is a leader elector
//! ([`shardring::runtime::leader`]) on one Lease in the operator's namespace
//! (the account's, else the test's; see [`crate::account`]) and
//! a controller that writes only while its elector says it leads. Killing a
//! replica aborts both tasks (no graceful release of the Lease, as with
//! SIGKILL), so the other takes over once the Lease expires.

use std::time::Duration;

use crate::cluster::Cluster;
use shardring::controller::{
    Context, ControllerConfig, ControllerMetrics, WatchScope, run_controller,
};
use shardring::runtime::leader::{self, LeaderConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::harness::{HarnessError, STEP_TIMEOUT};
use shardring_devkit::wait::{Probe, wait_for};

/// The Lease both replicas compete for, in the test's own namespace.
pub const LEASE_NAME: &str = "shardring-e2e-leader";

/// Where the replicas of the test in `namespace` reaching `cluster` keep
/// their Lease: [`LEASE_NAME`] in the test's namespace, or one named after
/// the test's namespace in the operator's (shared by every test).
pub fn lease_of<'a>(cluster: &'a Cluster, namespace: &'a str) -> (String, &'a str) {
    match cluster.operator_namespace.as_deref() {
        Some(home) => (format!("{namespace}-leader"), home),
        None => (LEASE_NAME.to_owned(), namespace),
    }
}

/// One replica: its elector and its controller.
pub struct Replica {
    /// Its leader identity.
    pub identity: String,
    is_leader: watch::Receiver<bool>,
    elector: JoinHandle<Result<(), leader::LeaderError>>,
    controller: JoinHandle<()>,
    shutdown: CancellationToken,
}

impl Replica {
    /// Starts replica `identity` for `namespace`, reaching the API server
    /// as `cluster` says, with short election timings (6 s lease, 4 s renew
    /// deadline, 1 s retry) so a takeover happens within seconds.
    pub async fn start(cluster: &Cluster, namespace: &str, identity: &str) -> Self {
        let shutdown = CancellationToken::new();
        let client = &cluster.client;
        let (lease, lease_namespace) = lease_of(cluster, namespace);
        let config = LeaderConfig {
            lease_duration: Duration::from_secs(6),
            renew_deadline: Duration::from_secs(4),
            retry_period: Duration::from_secs(1),
            ..LeaderConfig::new(&lease, lease_namespace, identity)
        };
        let handle = leader::spawn(client.clone(), config, shutdown.clone());
        let mut registry = shardring::runtime::metrics::new_registry();
        let metrics = ControllerMetrics::register(&mut registry);
        let sources =
            crate::operator::emulator_sources(crate::harness::REGION, client, lease_namespace)
                .await;
        let context = Context::builder(client.clone(), metrics)
            .sources(sources)
            .publish_events(None)
            .leader(handle.is_leader.clone());
        let controller = tokio::spawn(run_controller(
            context,
            ControllerConfig {
                scope: WatchScope::of([namespace.to_owned()]),
                controller_class: Some(crate::harness::CONTROLLER_CLASS.to_owned()),
                ..ControllerConfig::default()
            },
            None,
            shutdown.clone(),
        ));
        Self {
            identity: identity.to_owned(),
            is_leader: handle.is_leader,
            elector: handle.task,
            controller,
            shutdown,
        }
    }

    /// Whether this replica currently leads.
    pub fn leads(&self) -> bool {
        *self.is_leader.borrow()
    }

    /// Fails if either task of a replica that should run has stopped.
    pub fn check_running(&self) -> Result<(), HarnessError> {
        if self.elector.is_finished() || self.controller.is_finished() {
            return Err(HarnessError::Consumer(format!(
                "operator replica {} stopped early",
                self.identity
            )));
        }
        Ok(())
    }

    /// Kills the replica: both tasks aborted, the Lease left as it is.
    pub async fn kill(self) {
        self.elector.abort();
        self.controller.abort();
        let _ = self.elector.await;
        let _ = self.controller.await;
    }

    /// Stops the replica gracefully (cleanup).
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(STEP_TIMEOUT, self.controller).await;
        let _ = tokio::time::timeout(STEP_TIMEOUT, self.elector).await;
    }
}

/// Waits until exactly one of `replicas` leads and returns its index.
pub async fn wait_single_leader(replicas: &[Replica]) -> Result<usize, HarnessError> {
    let index = wait_for("exactly one leading replica", STEP_TIMEOUT, || {
        let leading: Vec<usize> = replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.leads())
            .map(|(i, _)| i)
            .collect();
        let running = replicas.iter().try_for_each(Replica::check_running);
        async move {
            running?;
            Ok::<_, HarnessError>(match leading.as_slice() {
                [one] => Probe::Done(*one),
                other => Probe::Pending(format!("{} leaders", other.len())),
            })
        }
    })
    .await?;
    Ok(index)
}
