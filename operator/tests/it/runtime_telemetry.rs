//! Installing the global subscriber (in a process of its own, since a
//! process has one global subscriber): JSON logs install once; a second
//! install is an error.

use shardring::runtime::telemetry::{LogFormat, init};

use shardring_devkit::process::in_own_process;

#[test]
fn json_logging_installs_once() {
    if !in_own_process(module_path!(), "json_logging_installs_once") {
        return;
    }
    init(LogFormat::Json, "info,shardring=debug").unwrap();
    tracing::info!(shard = "shardId-000000000001", "a structured event");
    let error = init(LogFormat::Text, "info").unwrap_err();
    assert!(error.to_string().contains("already"), "{error}");
}
