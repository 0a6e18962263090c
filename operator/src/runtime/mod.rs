//! The operator's process runtime, shared by `shardring run` and the
//! controller: logging ([`telemetry`]), the Prometheus registry ([`metrics`]),
//! liveness/readiness state ([`health`]) and the HTTP server that exposes both
//! ([`server`]), Lease-based leader election ([`leader`]), waiting for the CRDs
//! ([`crd_wait`]) and graceful shutdown ([`shutdown`]).
//!
//! Typical wiring in `shardring run`:
//!
//! ```no_run
//! # async fn run(client: kube::Client) -> anyhow::Result<()> {
//! use std::{sync::Arc, time::Duration};
//! use shardring::runtime::{crd_wait, health::Health, leader, metrics, server::Server, shutdown};
//!
//! let token = shutdown::CancellationToken::new();
//! shutdown::cancel_on_signal(&token)?;
//! let mut registry = metrics::new_registry();
//! let leader_metrics = leader::LeaderMetrics::register(&mut registry);
//! // let controller_metrics = ControllerMetrics::register(&mut registry);
//! let health = Health::new();
//! let server = Server::bind("0.0.0.0:8080".parse()?, Arc::new(registry), health.clone()).await?;
//! let server_task = tokio::spawn(server.serve(token.clone().cancelled_owned()));
//! crd_wait::wait_for_crds_established(client.clone(), crd_wait::SHARDRING_CRDS, Duration::from_secs(60)).await?;
//! health.set_crds_established();
//! let config = leader::LeaderConfig::from_env("shardring-leader", "shardring-system");
//! config.validate()?;
//! let lease = leader::LeaderElector::new(client.clone(), config)
//!     .with_metrics(leader_metrics)
//!     .spawn(token.clone());
//! // Run the controller: write only while `*lease.is_leader.borrow()` is true,
//! // call `health.set_caches_synced()` after the first full sync, and cancel
//! // `token` (then exit non-zero) if `lease.task` finishes with an error.
//! # let _ = (server_task, lease); Ok(()) }
//! ```

pub mod crd_wait;
pub mod health;
pub mod leader;
pub mod leader_lease;
pub mod metrics;
pub mod server;
pub mod shutdown;
pub mod telemetry;
pub mod tls;
