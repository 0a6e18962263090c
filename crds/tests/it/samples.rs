//! The sample resources under `config/samples/` must stay valid: each parses
//! into its typed resource and passes the CRD's CEL rules, and the kustomization
//! lists only files that exist.

use kube::CustomResourceExt;
use kube::core::cel::Validator;
use shardring_crds::shard_group::ShardSource;
use shardring_crds::{ConsumerPool, ShardGroup};

use crate::common;

fn sample(name: &str) -> serde_json::Value {
    let path = common::workspace_path(&format!("config/samples/{name}"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
}

fn assert_valid<K: CustomResourceExt>(name: &str, object: &serde_json::Value) {
    let schema = common::open_api_schema::<K>();
    if let Err(errors) = Validator::new().validate(&schema, object, None) {
        panic!("{name} breaks the CRD's rules: {errors}");
    }
}

#[test]
fn consumer_pool_sample() {
    let object = sample("consumerpool.yaml");
    let pool: ConsumerPool = serde_json::from_value(object.clone()).expect("typed ConsumerPool");
    assert_eq!(
        pool.spec.selector.match_labels.as_ref().unwrap()["app"],
        "consumer"
    );
    assert_valid::<ConsumerPool>("consumerpool.yaml", &object);
}

#[test]
fn static_shard_group_sample() {
    let object = sample("shardgroup-static.yaml");
    let group: ShardGroup = serde_json::from_value(object.clone()).expect("typed ShardGroup");
    let ShardSource::Static(source) = &group.spec.source else {
        panic!("a static source: {:?}", group.spec.source);
    };
    assert_eq!(source.partition_names().count(), 16);
    assert_eq!(source.partition_name(15), "orders-15");
    assert_eq!(group.spec.pool_ref.name, "consumers");
    assert!(group.spec.handoff.drain_timeout().is_ok() && group.spec.rebalance.window().is_ok());
    assert_valid::<ShardGroup>("shardgroup-static.yaml", &object);
}

#[test]
fn throughput_shard_group_sample() {
    let object = sample("shardgroup-throughput.yaml");
    let group: ShardGroup = serde_json::from_value(object.clone()).expect("typed ShardGroup");
    assert_eq!(
        group.spec.balance,
        shardring_crds::shard_group::BalanceMode::Throughput
    );
    let throughput = group.throughput_settings();
    assert_eq!(throughput.band_percent, 10);
    assert!(throughput.half_life().is_ok() && throughput.damping_interval().is_ok());
    let scaling = group.spec.scaling.as_ref().expect("scaling");
    assert_eq!(scaling.target_kbps_per_pod, Some(2048));
    assert_eq!(group.spec.pool_ref.name, "consumers");
    assert_valid::<ShardGroup>("shardgroup-throughput.yaml", &object);
}

#[test]
fn kinesis_shard_group_sample() {
    let object = sample("shardgroup-kinesis.yaml");
    let group: ShardGroup = serde_json::from_value(object.clone()).expect("typed ShardGroup");
    let ShardSource::Kinesis(kinesis) = &group.spec.source else {
        panic!("a kinesis source: {:?}", group.spec.source);
    };
    assert_eq!(kinesis.stream_name(), Some("clicks"));
    assert_eq!(
        group.spec.lease_table.as_ref().unwrap().table_name,
        "clicks-consumer"
    );
    assert_eq!(group.consumer_name(), "clicks-consumer");
    assert_valid::<ShardGroup>("shardgroup-kinesis.yaml", &object);
}

#[test]
fn rabbitmq_shard_group_sample() {
    let object = sample("shardgroup-rabbitmq.yaml");
    let group: ShardGroup = serde_json::from_value(object.clone()).expect("typed ShardGroup");
    let ShardSource::Rabbitmq(rabbitmq) = &group.spec.source else {
        panic!("a rabbitmq source: {:?}", group.spec.source);
    };
    assert_eq!(rabbitmq.vhost, "orders");
    assert_eq!(rabbitmq.credentials_secret, "shardring-rabbitmq");
    assert_eq!(
        group.spec.source.refresh_interval(),
        Ok(std::time::Duration::from_secs(10))
    );
    assert!(group.spec.lease_table.is_none());
    assert_valid::<ShardGroup>("shardgroup-rabbitmq.yaml", &object);
}

#[test]
fn kustomization_lists_existing_samples() {
    let kustomization = sample("kustomization.yaml");
    let resources = kustomization["resources"].as_array().expect("resources");
    assert!(!resources.is_empty());
    for resource in resources {
        let name = resource.as_str().unwrap();
        assert!(
            common::workspace_path(&format!("config/samples/{name}")).is_file(),
            "{name} is missing"
        );
    }
}
