//! `shardring-dev plan` end to end through the built binary: both output formats,
//! YAML and JSON input, malformed input and duplicates.

use std::path::PathBuf;
use std::process::{Command, Output};

fn scenario(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shardring-cli-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn plan(path: &std::path::Path, format: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardring-dev"))
        .args(["plan", "--input"])
        .arg(path)
        .args(["--format", format])
        .output()
        .expect("run shardring")
}

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/samples/scenarios/orders.yaml")
}

const CONTRACT: &str = r#"
options: {consumerName: orders, balance: count, standbys: 0, maxShardsPerPod: 0, rebalance: all}
shards:
  - {id: shardId-000000000000, hashKeyRange: {start: "0", end: "340282366920938463463374607431768211455"}, parents: [], state: open}
pods:
  - {name: consumer-0, ready: true, terminating: false, capacity: 1, zone: a, node: n1}
previous:
  shardId-000000000000: consumer-0
"#;

#[test]
fn json_matches_the_contract_example() {
    let out = plan(&scenario("contract.yaml", CONTRACT), "json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = serde_json::json!({
        "assignment": {"shardId-000000000000": {"owner": "consumer-0", "standbys": []}},
        "pending": [], "unassigned": [], "loads": {"consumer-0": 1}, "moves": 0
    });
    assert_eq!(got, want);
}

#[test]
fn json_input_gives_the_same_plan() {
    let input: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(sample()).unwrap()).unwrap();
    let json = scenario("orders.json", &serde_json::to_string(&input).unwrap());
    let from_yaml = plan(&sample(), "json");
    let from_json = plan(&json, "json");
    assert!(from_yaml.status.success() && from_json.status.success());
    assert_eq!(from_yaml.stdout, from_json.stdout);
}

#[test]
fn sample_scenario_json() {
    let out = plan(&sample(), "json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: Vec<&str> = got
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["assignment", "loads", "moves", "pending", "unassigned"]
    );
    assert_eq!(
        got["pending"],
        serde_json::json!(["shardId-000000000004", "shardId-000000000005"])
    );
    assert_eq!(
        got["assignment"]["shardId-000000000004"]["owner"],
        serde_json::Value::Null
    );
    // consumer-2 is terminating: it gets nothing and its shard moves.
    assert!(got["loads"].get("consumer-2").is_none());
    assert_eq!(got["moves"], 1);
    for shard in [
        "shardId-000000000000",
        "shardId-000000000001",
        "shardId-000000000002",
        "shardId-000000000003",
    ] {
        let entry = &got["assignment"][shard];
        assert_ne!(entry["owner"], "consumer-2");
        assert_eq!(entry["standbys"].as_array().unwrap().len(), 1);
        assert_ne!(entry["standbys"][0], entry["owner"]);
    }
    assert!(
        got["assignment"].get("shardId-000000000003").is_some(),
        "closed shards are still read"
    );
}

#[test]
fn table_format() {
    let out = plan(&sample(), "table");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("POD "), "{text}");
    for pod in ["consumer-0", "consumer-1", "consumer-2", "consumer-3"] {
        assert!(text.contains(pod), "{text}");
    }
    assert!(text.contains("draining"), "{text}");
    assert!(
        text.contains(
            "balance: 4 shards on 3 eligible pods, fair share 1.33, min 1, max 2, max-min 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("moves: 1 (required 1, optional 0); pending: 2; unassigned: 0"),
        "{text}"
    );
}

#[test]
fn malformed_input_names_field_and_line() {
    let path = scenario(
        "bad-state.yaml",
        "options: {consumerName: x}\nshards:\n  - {id: a}\n  - {id: b, state: opn}\n",
    );
    let out = plan(&path, "json");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shards[1].state") && err.contains("line 4"),
        "{err}"
    );

    let path = scenario("bad-field.yaml", "pods:\n  - {name: p, capacty: 2}\n");
    let out = plan(&path, "table");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("capacty") && err.contains("line 2"), "{err}");

    let path = scenario(
        "bad-json.json",
        "{\"pods\": [{\"name\": \"a\"},\n {\"name\": \"b\", \"capacity\": \"two\"}]}",
    );
    let out = plan(&path, "json");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pods[1].capacity") && err.contains("line 2"),
        "{err}"
    );

    let path = scenario(
        "bad-range.yaml",
        "shards:\n  - {id: a}\n  - {id: b, hashKeyRange: {start: \"9\", end: \"1\"}}\n",
    );
    let out = plan(&path, "json");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"b\"") && err.contains("hashKeyRange") && err.contains("line 3"),
        "{err}"
    );

    let out = plan(std::path::Path::new("/nonexistent/scenario.yaml"), "json");
    assert!(!out.status.success());
}

#[test]
fn duplicates_are_errors() {
    let path = scenario(
        "dup-shard.yaml",
        "shards:\n  - {id: s1}\n  - {id: s2}\n  - {id: s1}\npods:\n  - {name: p}\n",
    );
    let out = plan(&path, "json");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("duplicate shard id \"s1\"") && err.contains("line 4"),
        "{err}"
    );

    let path = scenario(
        "dup-pod.yaml",
        "shards:\n  - {id: s1}\npods:\n  - {name: p}\n  - {name: p}\n",
    );
    let out = plan(&path, "json");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("duplicate pod name \"p\"") && err.contains("line 5"),
        "{err}"
    );
}

#[test]
fn a_load_for_a_shard_the_input_lacks_is_an_error() {
    let path = scenario(
        "unknown-load.yaml",
        "options: {balance: throughput}\nshards:\n  - {id: s1}\n  - {id: s2}\npods:\n  - {name: p}\nloads:\n  s1: {rate: 100}\n  s9: {rate: 100}\n",
    );
    let out = plan(&path, "json");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("loads names shard \"s9\"") && err.contains("line 9"),
        "{err}"
    );
    // The same loads for shards it has plan.
    let path = scenario(
        "known-load.yaml",
        "options: {balance: throughput}\nshards:\n  - {id: s1}\n  - {id: s2}\npods:\n  - {name: p}\nloads:\n  s1: {rate: 100}\n  s2: {rate: 100}\n",
    );
    let out = plan(&path, "json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn hash_keys_command() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shardring-dev"))
            .arg("hash-keys")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, all, _) = run(&["--count", "6"]);
    assert!(ok);
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[0], "170141183460469231731687303715884105728");
    // Continuing from the first two keys gives the other four.
    let existing = scenario(
        "keys.txt",
        &format!("# in use\n{}\n{}\n", lines[0], lines[1]),
    );
    let (ok, rest, _) = run(&["--count", "4", "--existing", existing.to_str().unwrap()]);
    assert!(ok);
    assert_eq!(rest.lines().collect::<Vec<_>>(), lines[2..]);
    let bad = scenario("bad-keys.txt", "1\n2\nnope\n");
    let (ok, _, err) = run(&["--count", "1", "--existing", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("line 3"), "{err}");
}
