//! `shardring topology` against kinesis-local and dynalite: the JSON shape of
//! the issue (`{"shards": [{"id", "state", "parents", "hashKeyRange",
//! "leaseOwner", "checkpoint"}]}`) and the table format.

use std::process::Command;

use shardring::lease_table::{Checkpoint, LeaseRecord};

use crate::support;
use crate::support::kcl_lease;

fn topology(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_shardring"))
        .arg("topology")
        .args(args)
        // No AWS credentials in the environment: loopback endpoints get
        // dummy ones.
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_PROFILE")
        .env("AWS_REGION", support::REGION)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("run shardring");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into(),
        String::from_utf8_lossy(&output.stderr).into(),
    )
}

#[tokio::test]
async fn prints_the_shard_tree_with_leases() {
    let kinesis = support::kinesis();
    let dynamo = support::dynamodb();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    let ddb = support::dynamodb_admin(&dynamo.endpoint()).await;
    support::create_stream(&admin, "clicks", 1).await;
    support::split_in_half(&admin, "clicks", "shardId-000000000000", 0, u128::MAX).await;
    support::create_lease_table(&ddb, "clicks-app").await;
    support::put_lease(
        &ddb,
        "clicks-app",
        &kcl_lease(
            "shardId-000000000000",
            Some("pod-a"),
            7,
            Checkpoint::ShardEnd,
        ),
    )
    .await;
    support::put_lease(
        &ddb,
        "clicks-app",
        &LeaseRecord {
            parent_shard_ids: vec!["shardId-000000000000".into()],
            ..kcl_lease(
                "shardId-000000000001",
                Some("pod-b"),
                1,
                Checkpoint::Sequence("12345".into()),
            )
        },
    )
    .await;

    let endpoint = kinesis.endpoint();
    let lease_endpoint = dynamo.endpoint();
    let (ok, stdout, stderr) = topology(&[
        "--stream",
        "clicks",
        "--endpoint",
        &endpoint,
        "--lease-table",
        "clicks-app",
        "--lease-endpoint",
        &lease_endpoint,
        "--page-size",
        "1",
        "--format",
        "json",
    ]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let shards = json["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 3);
    let parent = &shards[0];
    assert_eq!(parent["id"], "shardId-000000000000");
    assert_eq!(parent["state"], "complete");
    assert_eq!(parent["parents"], serde_json::json!([]));
    assert_eq!(
        parent["hashKeyRange"],
        serde_json::json!({"start": "0", "end": u128::MAX.to_string()})
    );
    assert_eq!(parent["leaseOwner"], "pod-a");
    assert_eq!(parent["checkpoint"], "SHARD_END");
    let child = shards
        .iter()
        .find(|s| s["id"] == "shardId-000000000001")
        .expect("child");
    assert_eq!(child["state"], "open");
    assert_eq!(
        child["parents"],
        serde_json::json!(["shardId-000000000000"])
    );
    assert_eq!(child["leaseOwner"], "pod-b");
    assert_eq!(child["checkpoint"], "12345");
    let other = shards
        .iter()
        .find(|s| s["id"] == "shardId-000000000002")
        .expect("child");
    assert!(other["leaseOwner"].is_null() && other["checkpoint"].is_null());
    for shard in shards {
        let keys: Vec<&str> = shard
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), 6, "{keys:?}");
    }

    let (ok, table, stderr) = topology(&["--stream", "clicks", "--endpoint", &endpoint]);
    assert!(ok, "{stderr}");
    assert!(
        table.contains("shardId-000000000000") && table.contains("  shardId-000000000001"),
        "{table}"
    );
    assert!(
        table.contains("closed"),
        "without a lease table a closed parent is only closed: {table}"
    );
    assert!(table.contains("3 shards, 2 open"), "{table}");

    let (ok, _, stderr) = topology(&["--stream", "missing", "--endpoint", &endpoint]);
    assert!(!ok);
    assert!(stderr.contains("not found"), "{stderr}");
}
