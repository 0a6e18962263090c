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

/// Runs the repository's Python script `script` (a path from the root) with
/// `args` under `SHARDRING_PYTHON` (default `python3`): its output, or
/// `None`, saying `SKIPPED`, without an interpreter, unless
/// `SHARDRING_REQUIRE_TOOLS` is set (as CI sets it), when that fails the
/// test.
fn python_script<S: AsRef<std::ffi::OsStr>>(
    script: &str,
    args: &[S],
) -> Option<std::process::Output> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var("SHARDRING_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    match std::process::Command::new(&python)
        .arg(root.join(script))
        .args(args)
        .output()
    {
        Ok(output) => Some(output),
        Err(error) if std::env::var_os("SHARDRING_REQUIRE_TOOLS").is_none() => {
            eprintln!("SKIPPED: no Python interpreter ({python}: {error})");
            None
        }
        Err(error) => panic!("{python}: {error}"),
    }
}
