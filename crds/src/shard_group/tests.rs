//! Unit tests of the typed accessors and defaults.

use std::time::Duration;

use super::*;

fn group(spec: serde_json::Value) -> ShardGroup {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": spec
    }))
    .unwrap()
}

#[test]
fn defaults_fill_an_empty_spec() {
    let group =
        group(serde_json::json!({"poolRef": {"name": "p"}, "source": {"static": {"count": 2}}}));
    let spec = &group.spec;
    assert_eq!(spec.standbys, 0);
    assert_eq!(spec.balance, BalanceMode::Count);
    assert_eq!(spec.handoff.drain_timeout(), Ok(Duration::from_secs(60)));
    assert_eq!(spec.handoff.lease_failover(), Ok(Duration::from_secs(10)));
    assert_eq!(spec.rebalance.delay(), Ok(Duration::from_secs(30)));
    assert_eq!(spec.rebalance.window(), Ok(Duration::from_secs(60)));
    let source = spec.source.static_source.as_ref().unwrap();
    assert_eq!(
        source.partition_names().collect::<Vec<_>>(),
        ["partition-0", "partition-1"]
    );
    assert_eq!(spec.source.summary(), "static:2");
}

#[test]
fn output_names_default_from_the_group_name() {
    let plain =
        group(serde_json::json!({"poolRef": {"name": "p"}, "source": {"static": {"count": 1}}}));
    assert_eq!(plain.config_map_name(), "orders-assignment");
    assert_eq!(plain.annotation_key(), "assignment.shardring.io/orders");
    assert_eq!(plain.consumer_name(), "orders");
    assert_eq!(plain.qualified_name(), "shop/orders");
    let custom = group(serde_json::json!({
        "poolRef": {"name": "p"}, "source": {"static": {"count": 1}}, "consumerName": "orders-app",
        "output": {"annotationKey": "example.com/shards", "configMapName": "orders-shards"}
    }));
    assert_eq!(custom.config_map_name(), "orders-shards");
    assert_eq!(custom.annotation_key(), "example.com/shards");
    assert_eq!(custom.consumer_name(), "orders-app");
}

#[test]
fn kinesis_name_and_region_come_from_the_arn() {
    let by_arn = KinesisSource {
        stream_arn: Some("arn:aws:kinesis:eu-west-1:123456789012:stream/clicks".into()),
        ..Default::default()
    };
    assert_eq!(by_arn.stream_name(), Some("clicks"));
    assert_eq!(by_arn.region(), Some("eu-west-1"));
    let explicit = KinesisSource {
        region: Some("us-east-2".into()),
        ..by_arn
    };
    assert_eq!(explicit.region(), Some("us-east-2"));
    let by_name = KinesisSource {
        stream_name: Some("orders".into()),
        ..Default::default()
    };
    assert_eq!(
        (by_name.stream_name(), by_name.region()),
        (Some("orders"), None)
    );
    let source = ShardSource {
        kinesis: Some(by_name),
        static_source: None,
    };
    assert_eq!(source.summary(), "kinesis:orders");
}

#[test]
fn accessors_report_the_field_of_a_bad_duration() {
    let handoff = HandoffSpec {
        drain_timeout: "0s".into(),
        lease_failover: "ten".into(),
    };
    let error = handoff.drain_timeout().unwrap_err();
    assert_eq!(error.field, "handoff.drainTimeout");
    assert_eq!(
        error.to_string(),
        "spec.handoff.drainTimeout: duration \"0s\" must be greater than zero"
    );
    assert_eq!(
        handoff.lease_failover().unwrap_err().field,
        "handoff.leaseFailover"
    );
    let rebalance = RebalanceSpec {
        delay: "0s".into(),
        ..Default::default()
    };
    assert_eq!(rebalance.delay(), Ok(Duration::ZERO));
}
