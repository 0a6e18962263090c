//! Leader election: a background task that keeps trying to acquire the
//! operator's Lease, renews it every retry period while it holds it, and
//! publishes "am I the leader" on a watch channel. Only the leader writes; a
//! replica that loses the Lease — renewals failing until the renew deadline,
//! or another holder observed — sees the channel flip to `false` at once,
//! before the Lease can expire for anyone else (renew deadline < lease
//! duration). On shutdown the leader releases the Lease so a standby takes
//! over within one retry period.
//!
//! Defaults follow client-go: 15 s lease, 10 s renew deadline, 2 s retry.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::leader_lease::{Attempt, LeaderLease, LeaderLeaseError};
use crate::clock::Clock;

/// Default time a Lease stays valid without renewal.
pub(crate) const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default time the leader keeps retrying a failed renewal before stepping down.
pub(crate) const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default interval between acquire/renew attempts.
pub(crate) const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Where and how to elect a leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Name of the Lease object, e.g. `shardring-leader`.
    pub lease_name: String,
    /// Namespace of the Lease (the operator's namespace).
    pub namespace: String,
    /// This replica's identity, written as `holderIdentity`; unique per replica.
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader retries failed renewals before stepping down.
    pub renew_deadline: Duration,
    /// Interval between attempts, as candidate and as leader.
    pub retry_period: Duration,
}

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The durations do not satisfy retry < renew deadline < lease duration.
    #[error(
        "invalid leader election timing: need 0 < retry period ({retry:?}) < renew deadline \
         ({renew:?}) < lease duration ({lease:?})"
    )]
    Timing {
        /// Retry period.
        retry: Duration,
        /// Renew deadline.
        renew: Duration,
        /// Lease duration.
        lease: Duration,
    },
    /// The identity is empty.
    #[error("leader election identity is empty: set POD_NAME (the downward API) or HOSTNAME")]
    EmptyIdentity,
    /// A Lease request failed in a way retrying cannot fix (e.g. RBAC).
    #[error(transparent)]
    Lease(#[from] LeaderLeaseError),
}

impl LeaderError {
    /// Constant label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LeaderError::Timing { .. } | LeaderError::EmptyIdentity => "leader_config",
            LeaderError::Lease(e) => e.metric_label(),
        }
    }
}

impl LeaderConfig {
    /// A config with the default durations.
    pub fn new(lease_name: &str, namespace: &str, identity: &str) -> Self {
        Self {
            lease_name: lease_name.to_owned(),
            namespace: namespace.to_owned(),
            identity: identity.to_owned(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// A config with the default durations and [`default_identity`].
    pub fn from_env(lease_name: &str, namespace: &str) -> Self {
        Self::new(lease_name, namespace, &default_identity())
    }

    /// Checks the identity and `0 < retry < renew deadline < lease duration`
    /// (otherwise a leader could still write after its Lease expired).
    pub fn validate(&self) -> Result<(), LeaderError> {
        if self.identity.trim().is_empty() {
            return Err(LeaderError::EmptyIdentity);
        }
        let ordered = Duration::ZERO < self.retry_period
            && self.retry_period < self.renew_deadline
            && self.renew_deadline < self.lease_duration;
        if !ordered {
            return Err(LeaderError::Timing {
                retry: self.retry_period,
                renew: self.renew_deadline,
                lease: self.lease_duration,
            });
        }
        Ok(())
    }
}

/// This replica's identity: env `POD_NAME` (set through the downward API),
/// else the hostname (a pod's hostname is its name), else `shardring-<pid>`.
pub fn default_identity() -> String {
    let from_env = std::env::var("POD_NAME").ok();
    let from_host = || {
        std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
    };
    from_env
        .or_else(from_host)
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("shardring-{}", std::process::id()))
}

/// Leader-election metrics (`shardring_leader_*`).
#[derive(Debug, Clone, Default)]
pub struct LeaderMetrics {
    /// 1 while this replica holds the Lease.
    pub is_leader: Gauge,
    /// Times this replica acquired the Lease.
    pub acquisitions: Counter,
    /// Times this replica lost the Lease while holding it.
    pub losses: Counter,
    /// Failed acquire/renew attempts (API errors and timeouts).
    pub errors: Counter,
}

impl LeaderMetrics {
    /// Registers the leader metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let leader = registry.sub_registry_with_prefix("leader");
        leader.register(
            "is_leader",
            "1 while this replica holds the leader Lease",
            metrics.is_leader.clone(),
        );
        leader.register(
            "acquisitions",
            "Times this replica acquired the leader Lease",
            metrics.acquisitions.clone(),
        );
        leader.register(
            "losses",
            "Times this replica lost the leader Lease while holding it",
            metrics.losses.clone(),
        );
        leader.register(
            "errors",
            "Failed leader Lease acquire/renew attempts",
            metrics.errors.clone(),
        );
        metrics
    }
}

/// Handle on the running election.
#[derive(Debug)]
pub struct LeaderHandle {
    /// `true` while this replica holds the Lease. Check it before every
    /// write; `changed()` wakes on every flip. Ends `false` after shutdown.
    pub is_leader: watch::Receiver<bool>,
    /// The election task. It finishes with `Ok` after `shutdown` is cancelled
    /// (having released the Lease), or with `Err` on a fatal error; in both
    /// cases the caller should stop the process.
    pub task: JoinHandle<Result<(), LeaderError>>,
}

/// What a writer checks before each write: the election's flag
/// ([`LeaderHandle::is_leader`]), or `None` without an election (the
/// replica always writes).
pub type LeaderGate = Option<watch::Receiver<bool>>;

/// Whether a writer behind `gate` may write now.
pub fn may_write(gate: &LeaderGate) -> bool {
    gate.as_ref().is_none_or(|rx| *rx.borrow())
}

/// Starts leader election with the system clock and no metrics.
pub fn spawn(client: Client, config: LeaderConfig, shutdown: CancellationToken) -> LeaderHandle {
    LeaderElector::new(client, config).spawn(shutdown)
}

/// Builder for the election task (for a custom clock or metrics).
#[derive(Debug)]
pub struct LeaderElector {
    lock: LeaderLease,
    config: LeaderConfig,
    metrics: LeaderMetrics,
}

impl LeaderElector {
    /// An elector for `config` using the system clock.
    pub fn new(client: Client, config: LeaderConfig) -> Self {
        let lock = LeaderLease::new(
            client,
            &config.namespace,
            &config.lease_name,
            &config.identity,
            config.lease_duration,
        );
        Self {
            lock,
            config,
            metrics: LeaderMetrics::default(),
        }
    }

    /// Uses `clock` for Lease timestamps (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.lock = self.lock.with_clock(clock);
        self
    }

    /// Reports into `metrics` (from [`LeaderMetrics::register`]).
    pub fn with_metrics(mut self, metrics: LeaderMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Spawns the election task; it runs until `shutdown` is cancelled.
    pub fn spawn(self, shutdown: CancellationToken) -> LeaderHandle {
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(self.run(tx, shutdown));
        LeaderHandle {
            is_leader: rx,
            task,
        }
    }

    async fn run(
        self,
        tx: watch::Sender<bool>,
        shutdown: CancellationToken,
    ) -> Result<(), LeaderError> {
        self.config.validate()?;
        let result = self.elect(&tx, &shutdown).await;
        // Stop writing before giving the Lease up. Not a loss: no metric.
        let was_leader = tx.send_replace(false);
        if was_leader {
            self.metrics.is_leader.set(0);
        }
        if was_leader && result.is_ok() {
            // Bounded so a dead API server cannot hold up shutdown.
            match tokio::time::timeout(self.config.renew_deadline, self.lock.release()).await {
                Ok(Ok(true)) => {
                    tracing::info!(lease = %self.config.lease_name, "released the leader Lease")
                }
                Ok(Ok(false)) => {}
                Ok(Err(error)) => {
                    tracing::warn!(%error, "could not release the leader Lease; it will expire")
                }
                Err(_) => tracing::warn!("timed out releasing the leader Lease; it will expire"),
            }
        }
        result
    }

    /// The acquire/renew loop; returns `Ok` on shutdown, `Err` on a fatal error.
    async fn elect(
        &self,
        tx: &watch::Sender<bool>,
        shutdown: &CancellationToken,
    ) -> Result<(), LeaderError> {
        let cfg = &self.config;
        // Start of the last successful acquire/renew request, while leader.
        let mut renewed_at: Option<Instant> = None;
        loop {
            let started = Instant::now();
            // As leader, an attempt may not outlive the renew deadline
            // counted from the last success; as candidate, one deadline.
            let deadline = renewed_at.unwrap_or(started) + cfg.renew_deadline;
            let attempt = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                result = tokio::time::timeout_at(deadline, self.lock.try_acquire_or_renew()) => result,
            };
            match attempt {
                Ok(Ok(outcome)) if outcome.is_leader() => {
                    renewed_at = Some(started);
                    if !*tx.borrow() {
                        tracing::info!(lease = %cfg.lease_name, identity = %cfg.identity, "acquired the leader Lease");
                        self.metrics.acquisitions.inc();
                        self.metrics.is_leader.set(1);
                        tx.send_replace(true);
                    }
                }
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    renewed_at = None;
                    tracing::debug!(%holder, "leader Lease held by another replica");
                    self.step_down(tx, "another replica holds the Lease");
                }
                Ok(Ok(_conflict)) => {
                    // Someone wrote the Lease between our read and write: we
                    // cannot know we still hold it, so stop writing now and
                    // find out at the next attempt.
                    renewed_at = None;
                    self.step_down(tx, "conflicting write to the Lease");
                }
                Ok(Err(error)) if error.is_fatal() => {
                    self.metrics.errors.inc();
                    tracing::error!(%error, "leader election cannot continue");
                    return Err(error.into());
                }
                Ok(Err(error)) => {
                    self.metrics.errors.inc();
                    tracing::warn!(%error, "leader Lease attempt failed; retrying");
                }
                Err(_elapsed) => {
                    self.metrics.errors.inc();
                    tracing::warn!("leader Lease attempt timed out; retrying");
                }
            }
            if let Some(at) = renewed_at
                && Instant::now() >= at + cfg.renew_deadline
            {
                renewed_at = None;
                self.step_down(tx, "could not renew the Lease before the renew deadline");
            }
            tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep_until(started + cfg.retry_period) => {}
            }
        }
    }

    /// Flips the watch to `false`; returns whether we were leader.
    fn step_down(&self, tx: &watch::Sender<bool>, why: &str) -> bool {
        let was_leader = tx.send_replace(false);
        if was_leader {
            self.metrics.losses.inc();
            self.metrics.is_leader.set(0);
            tracing::warn!(lease = %self.config.lease_name, reason = why, "no longer the leader; stopped writing");
        }
        was_leader
    }
}
