//! The loads route: a report of the shards a pod reads is recorded (200,
//! with the rates refused and why), a reading that is negative, absurd, not
//! the caller's or from an older view than its ownership is refused and
//! counted and changes no estimate; a whole report from a future epoch is
//! 409, one with too many shards 413; a group that does not use loads says
//! so (409 LoadNotUsed), one the leader does not know is 404.

use std::collections::BTreeMap;

use http::Method;
use shardring_core::load::{Limits, LoadObservation};
use shardring_crds::assignment::{AssignmentDocument, ShardRecord};
use shardring_crds::endpoint::{LoadReportResponse, loads_path};

use super::support::{Endpoint, GROUP, NS, group, token};

/// `s-0` and `s-1` on `c-0`, `s-2` on `c-1`, at epoch 6.
fn document() -> AssignmentDocument {
    let record = |owner: &str| ShardRecord {
        owner: Some(owner.into()),
        ..ShardRecord::default()
    };
    let shards = BTreeMap::from([
        ("s-0".to_owned(), record("c-0")),
        ("s-1".to_owned(), record("c-0")),
        ("s-2".to_owned(), record("c-1")),
    ]);
    AssignmentDocument::from_shards(group().to_string(), 6, shards, [])
}

fn limits() -> Limits {
    Limits {
        half_life: std::time::Duration::from_secs(30),
        max_rate: 1024.0 * 1024.0,
    }
}

/// The endpoint with `c-0` and `c-1` served and the group's load book
/// synced as a reconcile of a throughput group syncs it.
async fn endpoint() -> Endpoint {
    let endpoint = Endpoint::start().await;
    endpoint.sync(&[("c-0", 6, &["s-0", "s-1"]), ("c-1", 6, &["s-2"])]);
    let doc = document();
    endpoint.state.loads.observe(
        &group(),
        Some(&doc),
        limits(),
        &Default::default(),
        jiff::Timestamp::now(),
    );
    endpoint
}

fn estimates(endpoint: &Endpoint) -> LoadObservation {
    endpoint.state.loads.observe(
        &group(),
        Some(&document()),
        limits(),
        &Default::default(),
        jiff::Timestamp::now(),
    )
}

#[tokio::test]
async fn a_report_is_recorded_and_its_unsound_readings_refused_with_a_reason() {
    let endpoint = endpoint().await;
    let client = endpoint.client();
    let body = br#"{"epoch":6,"shards":[
        {"shard":"s-0","bytesPerSecond":1000.5,"recordsPerSecond":12},
        {"shard":"s-1","bytesPerSecond":-3},
        {"shard":"s-1","bytesPerSecond":1e12},
        {"shard":"s-2","bytesPerSecond":10},
        {"shard":"s-77","bytesPerSecond":10}]}"#;
    let answer = client
        .send(
            Method::POST,
            &loads_path(NS, GROUP),
            Some(&token("c-0")),
            Some(body),
        )
        .await;
    answer.expect(200);
    let response: LoadReportResponse = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(response.accepted, 1);
    let reasons: Vec<(&str, &str)> = response
        .rejected
        .iter()
        .map(|r| (r.shard.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("s-1", "InvalidLoad"),
            ("s-1", "AbsurdLoad"),
            ("s-2", "NotOwner"),
            ("s-77", "UnknownShard")
        ]
    );
    assert!(
        response.rejected[3]
            .message
            .contains("not a shard of this group"),
        "{}",
        response.rejected[3].message
    );
    let seen = estimates(&endpoint);
    assert_eq!(seen.estimates.len(), 1);
    assert!((seen.estimates["s-0"].rate - 1000.5).abs() < 1e-9);
    assert_eq!(seen.rejected.total, 4);
    endpoint.stop().await;
}

#[tokio::test]
async fn whole_reports_are_refused_for_the_future_too_many_shards_and_groups_without_loads() {
    let endpoint = endpoint().await;
    let client = endpoint.client();
    let post = |body: String| {
        let client = client.clone();
        async move {
            client
                .send(
                    Method::POST,
                    &loads_path(NS, GROUP),
                    Some(&token("c-0")),
                    Some(body.as_bytes()),
                )
                .await
        }
    };
    let future = post(r#"{"epoch":7,"shards":[{"shard":"s-0","bytesPerSecond":1}]}"#.into()).await;
    future.expect(409);
    assert_eq!(future.error().reason, "FutureEpoch");
    let many: Vec<String> = (0..129)
        .map(|i| format!(r#"{{"shard":"s-{i}","bytesPerSecond":1}}"#))
        .collect();
    let too_many = post(format!(r#"{{"epoch":6,"shards":[{}]}}"#, many.join(","))).await;
    too_many.expect(413);
    assert_eq!(too_many.error().reason, "TooManyShards");
    let nan = post(r#"{"epoch":6,"shards":[{"shard":"s-0","bytesPerSecond":NaN}]}"#.into()).await;
    nan.expect(400);
    assert_eq!(nan.error().reason, "BadRequest");
    assert!(estimates(&endpoint).estimates.is_empty());

    endpoint.state.loads.not_used(&group());
    let unused = post(r#"{"epoch":6,"shards":[]}"#.into()).await;
    unused.expect(409);
    assert_eq!(unused.error().reason, "LoadNotUsed");
    endpoint.state.loads.remove_group(&group());
    let unknown = post(r#"{"epoch":6,"shards":[]}"#.into()).await;
    unknown.expect(404);
    assert_eq!(unknown.error().reason, "UnknownShardGroup");
    endpoint.stop().await;
}
