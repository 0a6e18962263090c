//! The developer tooling's integration tests, in one test binary: the demo
//! end to end (`demo_run`), the e2e suite's scenarios on the demo's embedded
//! stage (`embedded_scenarios`), `shardring-dev plan` and `hash-keys`
//! through the built binary (`cli_plan`), the workspace's import circles
//! (`import_circles`) and the benchmarks doc's figures blocks
//! (`bench_record`). Run one module with
//! `cargo test -p shardring-dev --test it <module>::`.

mod bench_record;
mod cli_plan;
mod demo_run;
mod embedded_scenarios;
mod import_circles;

/// The demo's stage (two emulators, a producer and several consumer
/// processes) runs once at a time: `demo_run` and each of the
/// `embedded_scenarios` hold this while they run, since two stages at once
/// starve each other on a small machine.
static STAGE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
