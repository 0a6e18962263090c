//! The engine's integration tests, in one test binary (one link instead of
//! one per file): each module was a test file of its own. Run one with
//! `cargo test -p shardring-engine --test it <module>::`, e.g. `golden::`.
//!
//! proptest keeps the seeds of past failures of `props` in
//! `tests/proptest-regressions/props.txt` (its default place for a test
//! crate with a `main.rs`).

mod common;
mod golden;
mod memory;
mod pool;
mod pool_standby;
mod pool_throughput;
mod props;
mod scenarios;
mod throughput;
