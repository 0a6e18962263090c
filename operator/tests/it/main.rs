//! The operator's integration tests, in one test binary: each module was a
//! test file, and so a test binary, of its own, and linking this crate 30
//! times was most of a CI run. Run one module with
//! `cargo test -p shardring --test it <module>::`, e.g.
//! `cargo test -p shardring --test it manifests::`.
//!
//! Shared: `shardring_core::fixtures` (the core's fixtures: groups, pools,
//! pods, observations), `controller_support` (the recording mock API server),
//! `support` (the local AWS emulators and a fault proxy); the two tests
//! that need a process to themselves run in a child process
//! (`shardring_devkit::process::in_own_process`). The tests of the former
//! files now run side by side. The demo's and the embedded scenarios' tests
//! are the `shardring-dev` crate's; the core's rules (plan, handoff
//! protocol, pod-stopped timing) are tested in the core (`core/tests/it`).

mod allocator;
mod api_reconcile;
mod api_runner;
mod api_server;
mod controller_kinesis;
mod controller_observe;
mod controller_support;
mod endpoint_controller;
mod kinesis_cli;
mod kinesis_controller;
mod kinesis_faults;
mod kinesis_lifecycle;
mod kinesis_rate;
mod kinesis_topology;
mod lease_table;
mod manifests;
mod rabbitmq_source;
mod runtime_crd_wait;
mod runtime_leader;
mod runtime_leader_failover;
mod runtime_server;
mod runtime_shutdown;
mod runtime_telemetry;
mod support;
