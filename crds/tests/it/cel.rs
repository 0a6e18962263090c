//! CEL rules of both CRDs, evaluated client-side with kube's `cel` support
//! (kube-cel) against the generated `openAPIV3Schema`, the same rules the API
//! server enforces: a valid object passes, and each invalid variant fails with
//! the message that tells the user what to fix.

use kube::CustomResourceExt;
use kube::core::cel::Validator;
use serde_json::{Value, json};
use shardring_crds::{ConsumerPool, ShardGroup};

use crate::common;

/// The messages of every rule `object` breaks (with `old` for transition rules).
fn violations<K: CustomResourceExt>(object: &Value, old: Option<&Value>) -> Vec<String> {
    let schema = common::open_api_schema::<K>();
    match Validator::new().validate(&schema, object, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(|e| e.message.clone()).collect(),
    }
}

fn static_group() -> Value {
    json!({
        "apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": {"poolRef": {"name": "orders-consumers"}, "source": {"static": {"count": 16, "nameTemplate": "orders-{index}"}}}
    })
}

fn kinesis_group() -> Value {
    json!({
        "apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup",
        "metadata": {"name": "api-logs", "namespace": "prod"},
        "spec": {
            "poolRef": {"name": "log-consumers"},
            "source": {"kinesis": {"streamName": "api-logs", "region": "us-east-1", "endpoint": "http://localhost:4567", "refreshInterval": "1m"}},
            "leaseTable": {"tableName": "api-logs-consumer", "endpoint": "https://dynamodb.us-east-1.amazonaws.com"},
            "standbys": 1,
            "handoff": {"drainTimeout": "2m", "leaseFailover": "10s"},
            "rebalance": {"delay": "0s", "maxMovesPerWindow": 10, "window": "1m30s"},
            "output": {"annotationKey": "example.com/shards", "configMapName": "api-logs-shards"}
        }
    })
}

/// A `rabbitmq` source as a manifest holds it (defaults filled, as the API
/// server stores it).
fn rabbitmq_source() -> Value {
    json!({"rabbitmq": {
        "managementURL": "http://rabbitmq.messaging.svc:15672", "vhost": "/",
        "queuePattern": "orders\\.[0-9]+", "credentialsSecret": "shardring-rabbitmq",
        "refreshInterval": "10s"
    }})
}

fn rabbitmq_group() -> Value {
    with(&static_group(), "/spec/source", rabbitmq_source())
}

fn pool() -> Value {
    json!({
        "apiVersion": "shardring.io/v1alpha1", "kind": "ConsumerPool",
        "metadata": {"name": "orders-consumers", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "orders-consumer"}}, "capacity": {"default": 1, "label": "shardring.io/capacity"}, "maxShardsPerPod": 64}
    })
}

/// `base` with the JSON pointer `path` set to `value` (`Value::Null` removes it).
fn with(base: &Value, path: &str, value: Value) -> Value {
    let mut object = base.clone();
    let (parent, key) = path.rsplit_once('/').unwrap();
    let parent = object
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no parent for {path}"));
    let map = parent.as_object_mut().unwrap();
    if value.is_null() {
        map.remove(key);
    } else {
        map.insert(key.to_owned(), value);
    }
    object
}

/// Asserts that `object` breaks exactly one rule, whose message contains `expected`.
#[track_caller]
fn assert_refused<K: CustomResourceExt>(object: &Value, old: Option<&Value>, expected: &str) {
    let found = violations::<K>(object, old);
    assert!(
        found.len() == 1 && found[0].contains(expected),
        "expected one violation containing {expected:?}, got {found:?}"
    );
}

#[test]
fn valid_objects_pass() {
    assert_eq!(
        violations::<ShardGroup>(&static_group(), None),
        Vec::<String>::new()
    );
    assert_eq!(
        violations::<ShardGroup>(&kinesis_group(), None),
        Vec::<String>::new()
    );
    let by_arn = with(
        &kinesis_group(),
        "/spec/source/kinesis/streamName",
        Value::Null,
    );
    let by_arn = with(
        &by_arn,
        "/spec/source/kinesis/streamARN",
        json!("arn:aws:kinesis:eu-west-1:123456789012:stream/api-logs"),
    );
    assert_eq!(
        violations::<ShardGroup>(&by_arn, None),
        Vec::<String>::new()
    );
    assert_eq!(
        violations::<ShardGroup>(&rabbitmq_group(), None),
        Vec::<String>::new()
    );
    assert_eq!(
        violations::<ConsumerPool>(&pool(), None),
        Vec::<String>::new()
    );
    let by_expression = with(
        &pool(),
        "/spec/selector",
        json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
    );
    assert_eq!(
        violations::<ConsumerPool>(&by_expression, None),
        Vec::<String>::new()
    );
}

#[test]
fn exactly_one_source() {
    let none = with(&static_group(), "/spec/source", json!({}));
    assert_refused::<ShardGroup>(
        &none,
        None,
        "set exactly one of source.kinesis, source.static or source.rabbitmq",
    );
    let both = with(
        &static_group(),
        "/spec/source/kinesis",
        json!({"streamName": "s"}),
    );
    assert_refused::<ShardGroup>(
        &both,
        None,
        "set exactly one of source.kinesis, source.static or source.rabbitmq",
    );
}

#[test]
fn rabbitmq_source_rules() {
    let refused = [
        (
            "managementURL",
            json!("rabbitmq:15672"),
            "rabbitmq.managementURL must be an http:// or https:// URL",
        ),
        (
            "vhost",
            json!(""),
            "rabbitmq.vhost must be 1 to 255 characters",
        ),
        (
            "queuePattern",
            json!(""),
            "rabbitmq.queuePattern must be a regular expression of 1 to 1024 characters",
        ),
        (
            "credentialsSecret",
            json!("Not_A_Name"),
            "rabbitmq.credentialsSecret must be the name of a Secret in the operator's namespace",
        ),
        (
            "refreshInterval",
            json!("500ms"),
            "rabbitmq.refreshInterval must be a duration of at least 1s",
        ),
    ];
    for (field, value, expected) in refused {
        let object = with(
            &rabbitmq_group(),
            &format!("/spec/source/rabbitmq/{field}"),
            value,
        );
        assert_refused::<ShardGroup>(&object, None, expected);
    }
    // The KCL lease table is Kinesis's: a rabbitmq group has none.
    let with_leases = with(
        &rabbitmq_group(),
        "/spec/leaseTable",
        json!({"tableName": "orders-app"}),
    );
    assert_refused::<ShardGroup>(&with_leases, None, "a rabbitmq source has none: remove it");
    // The vhost is the queues' identity; the pattern, the URL, the Secret
    // and the refresh may change.
    let old = rabbitmq_group();
    let other_vhost = with(&old, "/spec/source/rabbitmq/vhost", json!("shop"));
    assert_refused::<ShardGroup>(&other_vhost, Some(&old), "rabbitmq.vhost cannot be changed");
    let mut changed = old.clone();
    for (field, value) in [
        ("queuePattern", json!("orders-[0-9]+")),
        ("managementURL", json!("https://rabbitmq.example.com")),
        ("credentialsSecret", json!("other-credentials")),
        ("refreshInterval", json!("1m")),
    ] {
        changed = with(&changed, &format!("/spec/source/rabbitmq/{field}"), value);
    }
    assert_eq!(
        violations::<ShardGroup>(&changed, Some(&old)),
        Vec::<String>::new()
    );
}

#[test]
fn kinesis_stream_identity() {
    let neither = with(
        &kinesis_group(),
        "/spec/source/kinesis/streamName",
        Value::Null,
    );
    assert_refused::<ShardGroup>(
        &neither,
        None,
        "set exactly one of kinesis.streamName or kinesis.streamARN",
    );
    let both = with(
        &kinesis_group(),
        "/spec/source/kinesis/streamARN",
        json!("arn:aws:kinesis:us-east-1:123456789012:stream/api-logs"),
    );
    assert_refused::<ShardGroup>(
        &both,
        None,
        "set exactly one of kinesis.streamName or kinesis.streamARN",
    );
    let bad_name = with(
        &kinesis_group(),
        "/spec/source/kinesis/streamName",
        json!("api logs"),
    );
    assert_refused::<ShardGroup>(
        &bad_name,
        None,
        "kinesis.streamName must be 1 to 128 characters",
    );
    let arn_only = with(
        &kinesis_group(),
        "/spec/source/kinesis/streamName",
        Value::Null,
    );
    for bad in [
        "api-logs",
        "arn:aws:sqs:us-east-1:123456789012:api-logs",
        "arn:aws:kinesis:us-east-1:1234:stream/api-logs",
    ] {
        let bad_arn = with(&arn_only, "/spec/source/kinesis/streamARN", json!(bad));
        assert_refused::<ShardGroup>(
            &bad_arn,
            None,
            "kinesis.streamARN must look like arn:aws:kinesis:",
        );
    }
    let china = with(
        &arn_only,
        "/spec/source/kinesis/streamARN",
        json!("arn:aws-cn:kinesis:cn-north-1:123456789012:stream/x"),
    );
    assert_eq!(violations::<ShardGroup>(&china, None), Vec::<String>::new());
    let region = with(
        &kinesis_group(),
        "/spec/source/kinesis/region",
        json!("US East"),
    );
    assert_refused::<ShardGroup>(&region, None, "kinesis.region must be an AWS region");
    let endpoint = with(
        &kinesis_group(),
        "/spec/source/kinesis/endpoint",
        json!("localhost:4567"),
    );
    assert_refused::<ShardGroup>(
        &endpoint,
        None,
        "kinesis.endpoint must be an http:// or https:// URL",
    );
    let refresh = with(
        &kinesis_group(),
        "/spec/source/kinesis/refreshInterval",
        json!("500ms"),
    );
    assert_refused::<ShardGroup>(
        &refresh,
        None,
        "kinesis.refreshInterval must be a duration of at least 1s",
    );
}

#[test]
fn static_source_rules() {
    let zero = with(&static_group(), "/spec/source/static/count", json!(0));
    assert_refused::<ShardGroup>(&zero, None, "static.count must be between 1 and 100000");
    let huge = with(&static_group(), "/spec/source/static/count", json!(100_001));
    assert_refused::<ShardGroup>(&huge, None, "static.count must be between 1 and 100000");
    let no_index = with(
        &static_group(),
        "/spec/source/static/nameTemplate",
        json!("orders"),
    );
    assert_refused::<ShardGroup>(&no_index, None, "static.nameTemplate must contain {index}");
    // The default template (`partition-{index}`) is applied before the rules run.
    let defaulted = with(
        &static_group(),
        "/spec/source/static/nameTemplate",
        Value::Null,
    );
    assert_eq!(
        violations::<ShardGroup>(&defaulted, None),
        Vec::<String>::new()
    );
}

#[test]
fn durations_must_be_go_style_and_positive() {
    for (field, message) in [
        (
            "/spec/handoff/drainTimeout",
            "handoff.drainTimeout must be a positive duration",
        ),
        (
            "/spec/handoff/leaseFailover",
            "handoff.leaseFailover must be a positive duration",
        ),
        (
            "/spec/rebalance/window",
            "rebalance.window must be a positive duration",
        ),
    ] {
        for bad in ["0s", "10", "1.5s", "-1s", "1d", "ten seconds", ""] {
            assert_refused::<ShardGroup>(&with(&kinesis_group(), field, json!(bad)), None, message);
        }
        for good in ["1ms", "45s", "1m30s", "2h"] {
            assert_eq!(
                violations::<ShardGroup>(&with(&kinesis_group(), field, json!(good)), None),
                Vec::<String>::new(),
                "{field}={good}"
            );
        }
    }
    let delay = with(&kinesis_group(), "/spec/rebalance/delay", json!("30"));
    assert_refused::<ShardGroup>(&delay, None, "rebalance.delay must be a duration");
    for bad in ["5", "-1s", "1d", "soon"] {
        let initial = with(&kinesis_group(), "/spec/rebalance/initialDelay", json!(bad));
        assert_refused::<ShardGroup>(&initial, None, "rebalance.initialDelay must be a duration");
    }
    for good in ["0s", "500ms", "5s", "1m"] {
        let initial = with(
            &kinesis_group(),
            "/spec/rebalance/initialDelay",
            json!(good),
        );
        assert_eq!(
            violations::<ShardGroup>(&initial, None),
            Vec::<String>::new(),
            "initialDelay={good}"
        );
    }
}

#[test]
fn counts_and_names() {
    let standbys = with(&static_group(), "/spec/standbys", json!(6));
    assert_refused::<ShardGroup>(&standbys, None, "standbys must be between 0 and 5");
    let moves = with(
        &kinesis_group(),
        "/spec/rebalance/maxMovesPerWindow",
        json!(0),
    );
    assert_refused::<ShardGroup>(
        &moves,
        None,
        "rebalance.maxMovesPerWindow must be at least 1",
    );
    let consumer = with(&static_group(), "/spec/consumerName", json!(""));
    assert_refused::<ShardGroup>(&consumer, None, "consumerName must be 1 to 253 characters");
    let pool_ref = with(&static_group(), "/spec/poolRef/name", json!("Orders_Pool"));
    assert_refused::<ShardGroup>(
        &pool_ref,
        None,
        "poolRef.name must be the name of a ConsumerPool",
    );
    let table = with(&kinesis_group(), "/spec/leaseTable/tableName", json!("ab"));
    assert_refused::<ShardGroup>(
        &table,
        None,
        "leaseTable.tableName must be a DynamoDB table name",
    );
    for bad in [
        "example.com/",
        "/shards",
        "example.com/-shards",
        "Example.com/shards",
        &format!("example.com/{}", "a".repeat(64)),
    ] {
        let key = with(&kinesis_group(), "/spec/output/annotationKey", json!(bad));
        assert_refused::<ShardGroup>(&key, None, "output.annotationKey must be a qualified name");
    }
    let plain_key = with(
        &kinesis_group(),
        "/spec/output/annotationKey",
        json!("shards"),
    );
    assert_eq!(
        violations::<ShardGroup>(&plain_key, None),
        Vec::<String>::new()
    );
    let map = with(
        &kinesis_group(),
        "/spec/output/configMapName",
        json!("API_logs"),
    );
    assert_refused::<ShardGroup>(&map, None, "output.configMapName must be a DNS subdomain");
}

#[test]
fn shard_group_name_fits_the_annotation_key() {
    let name_63 = "a".repeat(63);
    let fits = with(&static_group(), "/metadata/name", json!(name_63));
    assert_eq!(violations::<ShardGroup>(&fits, None), Vec::<String>::new());
    let too_long = with(
        &static_group(),
        "/metadata/name",
        json!(format!("{name_63}b")),
    );
    assert_refused::<ShardGroup>(
        &too_long,
        None,
        "ShardGroup name must be at most 63 characters",
    );
}

#[test]
fn source_type_and_stream_are_immutable() {
    let old = kinesis_group();
    let to_static = with(&old, "/spec/source", json!({"static": {"count": 4}}));
    assert_refused::<ShardGroup>(
        &to_static,
        Some(&old),
        "the source type (kinesis, static or rabbitmq) cannot be changed",
    );
    let to_rabbitmq = with(&old, "/spec/source", rabbitmq_source());
    let to_rabbitmq = with(&to_rabbitmq, "/spec/leaseTable", Value::Null);
    assert_refused::<ShardGroup>(
        &to_rabbitmq,
        Some(&old),
        "the source type (kinesis, static or rabbitmq) cannot be changed",
    );
    let other_stream = with(&old, "/spec/source/kinesis/streamName", json!("other"));
    assert_refused::<ShardGroup>(&other_stream, Some(&old), "the stream cannot be changed");
    // Everything else may change, including the pool and the refresh interval.
    let changed = with(&old, "/spec/poolRef/name", json!("new-pool"));
    let changed = with(
        &changed,
        "/spec/source/kinesis/refreshInterval",
        json!("45s"),
    );
    assert_eq!(
        violations::<ShardGroup>(&changed, Some(&old)),
        Vec::<String>::new()
    );
    let old_static = static_group();
    let more_partitions = with(&old_static, "/spec/source/static/count", json!(32));
    assert_eq!(
        violations::<ShardGroup>(&more_partitions, Some(&old_static)),
        Vec::<String>::new()
    );
}

#[test]
fn consumer_pool_rules() {
    let empty = with(&pool(), "/spec/selector", json!({}));
    assert_refused::<ConsumerPool>(
        &empty,
        None,
        "selector must set matchLabels or matchExpressions",
    );
    let empty_labels = with(&pool(), "/spec/selector", json!({"matchLabels": {}}));
    assert_refused::<ConsumerPool>(
        &empty_labels,
        None,
        "selector must set matchLabels or matchExpressions",
    );
    let capacity = with(&pool(), "/spec/capacity/default", json!(0));
    assert_refused::<ConsumerPool>(
        &capacity,
        None,
        "capacity.default must be between 1 and 1000",
    );
    let label = with(&pool(), "/spec/capacity/label", json!("not a label"));
    assert_refused::<ConsumerPool>(&label, None, "capacity.label must be a label key");
    let cap = with(&pool(), "/spec/maxShardsPerPod", json!(0));
    assert_refused::<ConsumerPool>(&cap, None, "maxShardsPerPod must be at least 1");
    let ready = with(&pool(), "/spec/minReadySeconds", json!(3601));
    assert_refused::<ConsumerPool>(&ready, None, "minReadySeconds must be between 0 and 3600");
    let keys = with(
        &pool(),
        "/spec/topologyKeys",
        json!(["topology.kubernetes.io/zone", "bad key"]),
    );
    assert_refused::<ConsumerPool>(&keys, None, "every topologyKeys entry must be a label key");
    let many: Vec<String> = (0..9).map(|i| format!("example.com/k{i}")).collect();
    let too_many = with(&pool(), "/spec/topologyKeys", json!(many));
    assert_refused::<ConsumerPool>(
        &too_many,
        None,
        "topologyKeys may list at most 8 label keys",
    );
}

#[test]
fn throughput_and_scaling_rules() {
    let by_load = with(&static_group(), "/spec/balance", json!("throughput"));
    let tuned = with(
        &by_load,
        "/spec/throughput",
        json!({"bandPercent": 15, "halfLife": "20s", "dampingInterval": "10m", "staleAfter": "1m", "maxShardKBps": 2048}),
    );
    let scaled = with(
        &tuned,
        "/spec/scaling",
        json!({"targetKBpsPerPod": 4096, "minReplicas": 2, "maxReplicas": 40}),
    );
    assert_eq!(
        violations::<ShardGroup>(&scaled, None),
        Vec::<String>::new()
    );
    let by_shards = with(
        &static_group(),
        "/spec/scaling",
        json!({"targetShardsPerPod": 8}),
    );
    assert_eq!(
        violations::<ShardGroup>(&by_shards, None),
        Vec::<String>::new()
    );

    let count_with_settings = with(
        &static_group(),
        "/spec/throughput",
        json!({"bandPercent": 15}),
    );
    assert_refused::<ShardGroup>(
        &count_with_settings,
        None,
        "spec.throughput applies only with balance: throughput",
    );
    for (field, value, message) in [
        (
            "bandPercent",
            json!(0),
            "throughput.bandPercent must be between 1 and 100",
        ),
        (
            "bandPercent",
            json!(101),
            "throughput.bandPercent must be between 1 and 100",
        ),
        (
            "halfLife",
            json!("0s"),
            "throughput.halfLife must be a positive duration",
        ),
        (
            "dampingInterval",
            json!("5 min"),
            "throughput.dampingInterval must be a positive duration",
        ),
        (
            "staleAfter",
            json!("-1s"),
            "throughput.staleAfter must be a positive duration",
        ),
        (
            "maxShardKBps",
            json!(0),
            "throughput.maxShardKBps must be between 1 and 10000000",
        ),
    ] {
        let settings = with(&by_load, "/spec/throughput", json!({}));
        let bad = with(&settings, &format!("/spec/throughput/{field}"), value);
        assert_refused::<ShardGroup>(&bad, None, message);
    }
    let neither = with(&static_group(), "/spec/scaling", json!({"minReplicas": 1}));
    assert_refused::<ShardGroup>(
        &neither,
        None,
        "scaling needs exactly one of targetShardsPerPod and targetKBpsPerPod",
    );
    let both = with(
        &static_group(),
        "/spec/scaling",
        json!({"targetShardsPerPod": 4, "targetKBpsPerPod": 100}),
    );
    assert_refused::<ShardGroup>(
        &both,
        None,
        "scaling needs exactly one of targetShardsPerPod and targetKBpsPerPod",
    );
    let inverted = with(
        &static_group(),
        "/spec/scaling",
        json!({"targetShardsPerPod": 4, "minReplicas": 5, "maxReplicas": 3}),
    );
    assert_refused::<ShardGroup>(
        &inverted,
        None,
        "scaling.minReplicas must not exceed scaling.maxReplicas",
    );
    let zero = with(
        &static_group(),
        "/spec/scaling",
        json!({"targetShardsPerPod": 0}),
    );
    assert_refused::<ShardGroup>(&zero, None, "scaling.targetShardsPerPod must be at least 1");
}
