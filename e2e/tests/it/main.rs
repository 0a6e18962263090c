//! The end-to-end tests, in one test binary (one link of the operator, the
//! consumer library and the devkit instead of one per file): each module
//! was a test file of its own. Run one with
//! `cargo test -p shardring-e2e --test it <module>::`, e.g. `cluster::`
//! (`scenarios::` also matches `mock_scenarios::`: add `-- --skip
//! mock_scenarios` for the real-cluster suite alone).
//!
//! `cluster`, `scenarios`, `endpoint_release`, `endpoint_run` and
//! `leader_readiness` need a cluster reachable through KUBECONFIG and skip
//! without one (the latter three moved here from the operator's tests
//! against the mock API server, with their setup in `kit_group`); `mock_scenarios` runs scenarios against the
//! devkit's mock API server. `api_semantics` asserts what the operator
//! relies on of the API server against the real one and, where the mock
//! emulates it, against the mock too (the real half skips likewise).

mod api_semantics;
mod cluster;
mod day2;
mod endpoint_release;
mod endpoint_run;
mod kit_group;
mod kubectl_plugin;
mod leader_readiness;
mod least_privilege;
mod mock_scenarios;
mod namespace_scoped;
mod pod_wakes;
mod pool_balance;
mod pool_shared;
mod rabbitmq;
mod scenarios;
mod stable_identity;

/// Turns for the tests that run the operator against an API server, each
/// with its own emulators and consumer processes (on two cores, two of them
/// starve each other). A mock scenario takes it exclusively: one at a time,
/// as within their own binary before. The tests on a real cluster share it
/// (they ran side by side within theirs), so none of them runs beside a
/// mock scenario: cargo ran the former binaries one after another.
static TURNS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
