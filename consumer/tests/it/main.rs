//! The consumer library's integration tests, in one test binary (one link
//! of the crate and its dependencies instead of one per file): each module
//! was a test file of its own. Run one with
//! `cargo test -p shardring-consumer --test it <module>::`, e.g.
//! `python_example::`.
//!
//! Most start their own kinesis-local and dynalite on free loopback ports
//! (`support`), so they run side by side like the tests of one file did.

#[cfg(feature = "kube")]
mod configmap_watch;
mod endpoint;
mod lease_manager;
mod python_example;
mod rabbitmq_worker;
mod reference_consumer;
mod shard_reader;
mod support;
mod worker_handoff;
