//! Graceful shutdown: a real SIGTERM sent to the test's process cancels the
//! shared token (the test runs in a process of its own, so the signal
//! reaches no other test), and a token cancelled for another reason ends the
//! task.

use std::time::Duration;

use shardring::runtime::shutdown::{CancellationToken, cancel_on_signal};

use shardring_devkit::process::in_own_process;

#[tokio::test]
async fn sigterm_cancels_the_token_and_other_cancellation_ends_the_task() {
    if !in_own_process(
        module_path!(),
        "sigterm_cancels_the_token_and_other_cancellation_ends_the_task",
    ) {
        return;
    }
    // A token cancelled by someone else: the watcher task just ends.
    let other = CancellationToken::new();
    let task = cancel_on_signal(&other).unwrap();
    other.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the task ends with the token")
        .unwrap();

    // A real SIGTERM, after the handler is installed.
    let token = CancellationToken::new();
    let task = cancel_on_signal(&token).unwrap();
    assert!(!token.is_cancelled());
    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    tokio::time::timeout(Duration::from_secs(5), token.cancelled())
        .await
        .expect("SIGTERM cancels the token");
    task.await.unwrap();
}
