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
    assert_eq!(
        spec.source.named_partitions().unwrap(),
        ["partition-0", "partition-1"]
    );
    assert_eq!(spec.source.named_partition_count(), Some(2));
    assert_eq!(spec.source.summary(), "static:2");
    assert_eq!(spec.source.refresh_interval(), Ok(StaticSource::REFRESH));
    assert!(!spec.source.has_lineage());
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
    let source = ShardSource::Kinesis(by_name);
    assert_eq!(source.summary(), "kinesis:orders");
    assert!(source.has_lineage());
    assert_eq!(source.named_partitions(), None);
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
    assert_eq!(rebalance.initial_delay(), Ok(Duration::from_secs(5)));
    let zero = RebalanceSpec {
        initial_delay: "0s".into(),
        ..Default::default()
    };
    assert_eq!(zero.initial_delay(), Ok(Duration::ZERO));
    let bad = RebalanceSpec {
        initial_delay: "soon".into(),
        ..Default::default()
    };
    assert_eq!(
        bad.initial_delay().unwrap_err().field,
        "rebalance.initialDelay"
    );
}

#[test]
fn status_times_keep_their_rfc_3339_wire_format() {
    let stored = serde_json::json!({
        "epoch": 3,
        "shards": {"total": 0, "open": 0, "closed": 0, "pending": 0, "unassigned": 0, "held": 0},
        "pods": {"selected": 0, "eligible": 0},
        "minLoad": 0, "maxLoad": 0, "movesInFlight": 1,
        "moveLog": ["2026-11-21T12:00:00Z 3", "2026-11-21T12:00:30.25Z 1"],
        "lastPodChange": "2026-11-21T11:59:00Z",
        "drainStarted": {"a": "2026-11-21T12:00:01.123456789Z"},
        "drainDeliveries": {"a": ["2026-11-21T12:00:00.5Z", "2026-11-21T12:00:01.123456789Z"]},
        "oldestRevoke": "2026-11-21T12:00:00Z",
        "lastTopologyTime": "2026-11-21T12:00:02.5Z"
    });
    let status: ShardGroupStatus = serde_json::from_value(stored.clone()).unwrap();
    let t = |text: &str| text.parse::<jiff::Timestamp>().unwrap();
    assert_eq!(status.last_pod_change, Some(t("2026-11-21T11:59:00Z")));
    assert_eq!(
        status.move_log,
        [
            MoveLogEntry {
                at: t("2026-11-21T12:00:00Z"),
                moves: 3
            },
            MoveLogEntry {
                at: t("2026-11-21T12:00:30.25Z"),
                moves: 1
            }
        ]
    );
    assert_eq!(serde_json::to_value(&status).unwrap(), stored);
}

#[test]
fn status_times_that_do_not_parse_read_as_absent() {
    let status: ShardGroupStatus = serde_json::from_value(serde_json::json!({
        "moveLog": ["garbage 3", "2026-11-21T12:00:00Z", "2026-11-21T12:00:05Z x"],
        "lastPodChange": "yesterday",
        "drainStarted": {"a": "soon", "b": "2026-11-21T12:00:01Z"},
        "drainDeliveries": {"a": ["soon"], "b": ["later", "2026-11-21T12:00:01Z"]},
        "oldestRevoke": "",
        "lastTopologyTime": "2026-11-21 12:00"
    }))
    .unwrap();
    let t = |text: &str| text.parse::<jiff::Timestamp>().unwrap();
    // A bare time is one move; the other entries are dropped.
    assert_eq!(
        status.move_log,
        [MoveLogEntry {
            at: t("2026-11-21T12:00:00Z"),
            moves: 1
        }]
    );
    assert_eq!(status.last_pod_change, None);
    assert_eq!(
        status.drain_started,
        std::collections::BTreeMap::from([("b".to_owned(), t("2026-11-21T12:00:01Z"))])
    );
    // A list keeps the times that parse; a list left empty is dropped.
    assert_eq!(
        status.drain_deliveries,
        std::collections::BTreeMap::from([("b".to_owned(), vec![t("2026-11-21T12:00:01Z")])])
    );
    assert_eq!(status.oldest_revoke, None);
    assert_eq!(status.last_topology_time, None);
    // A value of the wrong type still fails, as it did for the strings.
    let wrong = serde_json::json!({"lastPodChange": 12});
    assert!(serde_json::from_value::<ShardGroupStatus>(wrong).is_err());
}

#[test]
fn a_move_log_entry_reads_what_it_writes() {
    let entry = MoveLogEntry {
        at: "2026-11-21T12:00:00Z".parse().unwrap(),
        moves: 2,
    };
    assert_eq!(entry.to_string(), "2026-11-21T12:00:00Z 2");
    assert_eq!(entry.to_string().parse(), Ok(entry));
    assert!("garbage 3".parse::<MoveLogEntry>().is_err());
    assert!("".parse::<MoveLogEntry>().is_err());
}

#[test]
fn a_rabbitmq_source_defaults_its_vhost_and_refresh() {
    let group = group(serde_json::json!({
        "poolRef": {"name": "p"},
        "source": {"rabbitmq": {
            "managementURL": "http://rabbitmq:15672",
            "queuePattern": "orders\\.[0-9]+",
            "credentialsSecret": "shardring-rabbitmq"
        }}
    }));
    let ShardSource::Rabbitmq(rabbitmq) = &group.spec.source else {
        panic!("a rabbitmq source: {:?}", group.spec.source);
    };
    assert_eq!(rabbitmq.vhost, "/");
    assert_eq!(rabbitmq.queue_pattern, "orders\\.[0-9]+");
    assert_eq!(
        group.spec.source.refresh_interval(),
        Ok(Duration::from_secs(10))
    );
    assert_eq!(group.spec.source.summary(), "rabbitmq:orders\\.[0-9]+");
    assert!(!group.spec.source.has_lineage());
    assert_eq!(group.spec.source.named_partition_count(), None);
    let other_vhost = ShardSource::Rabbitmq(RabbitMqSource {
        vhost: "shop".into(),
        ..rabbitmq.clone()
    });
    assert_eq!(other_vhost.summary(), "rabbitmq:orders\\.[0-9]+ in shop");
}

#[test]
fn a_source_is_exactly_one_kind_when_read() {
    // Today's manifests read as before: the field names are the variants'.
    let text = r#"{"static": {"count": 3, "nameTemplate": "q-{index}"}}"#;
    let source: ShardSource = serde_json::from_str(text).unwrap();
    assert_eq!(source.named_partition_count(), Some(3));
    assert_eq!(
        serde_json::to_value(&source).unwrap(),
        serde_json::json!({"static": {"count": 3, "nameTemplate": "q-{index}"}})
    );
    let kinesis: ShardSource =
        serde_json::from_str(r#"{"kinesis": {"streamName": "orders"}}"#).unwrap();
    assert_eq!(kinesis.summary(), "kinesis:orders");
    // Two kinds, or none, do not read (the schema refuses them first).
    assert!(
        serde_json::from_str::<ShardSource>(
            r#"{"kinesis": {"streamName": "o"}, "static": {"count": 1}}"#
        )
        .is_err()
    );
    assert!(serde_json::from_str::<ShardSource>("{}").is_err());
}

#[test]
fn a_source_reads_from_yaml_as_a_map() {
    let source: ShardSource =
        serde_yaml::from_str("static: {count: 2, nameTemplate: 'q-{index}'}").unwrap();
    assert_eq!(source.named_partition_count(), Some(2));
    let text = serde_yaml::to_string(&source).unwrap();
    assert!(text.starts_with("static:"), "{text}");
    let error = serde_yaml::from_str::<ShardSource>("{}").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("set exactly one of source.kinesis, source.static or source.rabbitmq"),
        "{error}"
    );
}
