//! shardring's test and benchmark kit. Owns [`apiserver`]: a stateful mock
//! Kubernetes API server served over HTTPS for what the real control plane
//! cannot do (injected faults, exact orderings, the log of every request),
//! reached the way a real user reaches a cluster — a `kube::Client` built
//! from a kubeconfig, watches with resourceVersions, bookmarks and 410
//! Gone. Also what every crate's tests share: the [`fixtures`] they put on
//! it (or on a real API server), the one launcher of the local AWS
//! [`emulators`] (kinesis-local and dynalite), a RabbitMQ [`broker`] of a
//! test's own (Debian's rabbitmq-server), the [`wait`] helpers they
//! poll with (and the wait for a Kinesis [`stream`] to be ACTIVE), and
//! [`process::in_own_process`] for tests that need a process of their own,
//! and the operator's [`access`] as the install ships it (RBAC, admission
//! policy, ServiceAccount tokens) for tests and benchmarks on a real server.
//!
//! The crate does not depend on the operator: the operator's tests depend on
//! it.

#![warn(missing_docs)]

#[cfg(feature = "apiserver")]
pub mod access;
#[cfg(feature = "apiserver")]
pub mod apiserver;
#[cfg(feature = "broker")]
pub mod broker;
pub mod emulators;
#[cfg(feature = "apiserver")]
pub mod fixtures;
pub mod listening;
pub mod process;
pub mod stream;
pub mod wait;
