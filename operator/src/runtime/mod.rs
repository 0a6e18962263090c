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
//! use shardring::runtime::{crd_wait, health::Health, leader, metrics, server::Server, shutdown};
//! use std::sync::Arc;
//!
//! let token = shutdown::Shutdown::new();
//! token.cancel_on_signal();
//! let mut registry = metrics::new_registry();
//! // let controller_metrics = ControllerMetrics::register(&mut registry);
//! let health = Health::new();
//! let server = Server::bind("0.0.0.0:8080".parse()?, Arc::new(registry), health.clone()).await?;
//! let server_task = tokio::spawn(server.serve(token.clone().cancelled_owned()));
//! crd_wait::wait_for_crds_established(client.clone(), crd_wait::SHARDRING_CRDS, std::time::Duration::from_secs(60)).await?;
//! health.set_crds_established();
//! let lease = leader::spawn(client.clone(), leader::LeaderConfig::from_env("shardring-leader", "shardring-system"), token.clone());
//! // run the controller; write only while *lease.is_leader.borrow() is true,
//! // call health.set_caches_synced() after the first full sync, and exit
//! // when lease.task finishes.
//! # let _ = server_task; Ok(()) }
//! ```

pub mod crd_wait;
pub mod health;
pub mod leader;
pub mod lease;
pub mod metrics;
pub mod server;
pub mod shutdown;
pub mod telemetry;
