//! One test in a child process of its own, for tests that need a process to
//! themselves in a crate whose tests share one binary (`tests/it`): a test
//! that sends SIGTERM to its process, installs the process's one global
//! tracing subscriber, or checks what happens before anything installed a
//! rustls crypto provider.

use std::process::Command;

/// Set in the child process to the path of the test it runs.
const CHILD: &str = "SHARDRING_TEST_OWN_PROCESS";

/// Whether the calling test runs its body here: `true` in the child process
/// started for it. Otherwise runs the current test binary again with only
/// this test (`module` is the caller's `module_path!()`, `test` its function
/// name), fails when that run fails or does not run exactly that test, and
/// returns `false`.
pub fn in_own_process(module: &str, test: &str) -> bool {
    // `module_path!()` starts with the crate's name, test paths do not.
    let module = module.split_once("::").map_or("", |(_, path)| path);
    let path = format!("{module}::{test}");
    if std::env::var_os(CHILD).is_some_and(|value| value == path.as_str()) {
        return true;
    }
    let output = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([&path, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &path)
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{path} in its own process: {}\n{stdout}\n{stderr}",
        output.status
    );
    false
}
