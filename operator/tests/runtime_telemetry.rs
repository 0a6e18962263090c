//! Installing the global subscriber (its own test binary, since a process has
//! one global subscriber): JSON logs install once; a second install is an error.

use shardring::runtime::telemetry::{LogFormat, init};

#[test]
fn json_logging_installs_once() {
    init(LogFormat::Json, "info,shardring=debug").unwrap();
    tracing::info!(shard = "shardId-000000000001", "a structured event");
    let error = init(LogFormat::Text, "info").unwrap_err();
    assert!(error.to_string().contains("already"), "{error}");
}
