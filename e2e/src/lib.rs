//! Harness for shardring's end-to-end tests against a real Kubernetes cluster:
//! finding a reachable cluster (or skipping clearly), polling with deadlines
//! instead of fixed sleeps (the devkit's `wait`, re-exported), running the
//! operator (in-process, or as the `shardring run` binary), and reading what
//! the operator published (ConfigMap and pod annotations).
//! The tests themselves live in `tests/`; how to run them is in `docs/e2e.md`.

pub mod account;
pub mod apiserver;
pub mod cluster;
pub mod consumers;
mod error;
pub mod harness;
pub mod kit;
pub mod namespace;
pub mod operator;
pub mod proxy;
pub mod published;
pub mod queues;
pub mod replicas;
pub mod scenarios;
mod settings;
mod settled;
pub mod stream;
pub mod tokens;
pub mod verdict;

pub use cluster::{Reachability, connect};
pub use operator::{Operator, OperatorError};
pub use published::{PublishedError, assignment_document, default_annotation_key, pod_view};
pub use shardring_devkit::wait::{Probe, WaitError, wait_for};
