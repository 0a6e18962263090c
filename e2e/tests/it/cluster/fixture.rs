//! The committed samples under test (`config/samples/consumerpool.yaml` and
//! `shardgroup-static.yaml`) placed in the test's namespace, and what the
//! checks derive from them: the group's name and partition count, the pod
//! labels the pool selects, the ConfigMap name and the annotation key.
//! Checked without a cluster too, so a sample change that would break the
//! test fails everywhere.

use std::collections::BTreeMap;
use std::path::Path;

use kube::ResourceExt;
use shardring_crds::assignment::CONFIGMAP_SUFFIX;
use shardring_crds::{ConsumerPool, ShardGroup};
use shardring_e2e::default_annotation_key;

/// Consumer pods created for the test.
pub(super) const PODS: usize = 3;

/// What the cluster test's steps return.
pub(super) type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The samples under test and what the checks derive from them.
pub(super) struct Fixture {
    pub(super) namespace: String,
    pub(super) pool: ConsumerPool,
    pub(super) group: ShardGroup,
    /// The ShardGroup's name.
    pub(super) name: String,
    /// Its static partition count.
    pub(super) shards: usize,
    /// Labels the pool selects (its `matchLabels`).
    pub(super) pod_labels: BTreeMap<String, String>,
    pub(super) config_map: String,
    pub(super) annotation_key: String,
}

impl Fixture {
    /// Reads the committed samples and places them in `namespace`.
    pub(super) fn from_samples(namespace: &str) -> TestResult<Self> {
        Self::from_sample_group(namespace, "shardgroup-static.yaml")
    }

    /// The sample pool and the sample ShardGroup `file` (with a static
    /// source), placed in `namespace`.
    pub(super) fn from_sample_group(namespace: &str, file: &str) -> TestResult<Self> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/samples");
        let read = |file: &str| -> TestResult<String> {
            std::fs::read_to_string(dir.join(file)).map_err(|e| format!("{file}: {e}").into())
        };
        let mut pool: ConsumerPool = serde_yaml_from(&read("consumerpool.yaml")?)?;
        let mut group: ShardGroup = serde_yaml_from(&read(file)?)?;
        pool.metadata.namespace = Some(namespace.to_owned());
        group.metadata.namespace = Some(namespace.to_owned());
        // Served by the suite's operator only, never by one installed in the cluster.
        group.labels_mut().insert(
            shardring_crds::CONTROLLER_CLASS_LABEL.to_owned(),
            shardring_e2e::harness::CONTROLLER_CLASS.to_owned(),
        );
        let name = group.name_any();
        let shards = group
            .spec
            .source
            .named_partition_count()
            .ok_or_else(|| format!("{file} has no static source"))? as usize;
        let pod_labels = pool
            .spec
            .selector
            .match_labels
            .clone()
            .filter(|labels| !labels.is_empty())
            .ok_or("consumerpool.yaml must select pods by matchLabels")?;
        let config_map = group
            .spec
            .output
            .config_map_name
            .clone()
            .unwrap_or_else(|| format!("{name}{CONFIGMAP_SUFFIX}"));
        let annotation_key = group
            .spec
            .output
            .annotation_key
            .clone()
            .unwrap_or_else(|| default_annotation_key(&name));
        Ok(Self {
            namespace: namespace.to_owned(),
            pool,
            group,
            name,
            shards,
            pod_labels,
            config_map,
            annotation_key,
        })
    }
}

/// YAML through JSON, so the typed API structs parse exactly as from the API server.
fn serde_yaml_from<T: serde::de::DeserializeOwned>(text: &str) -> TestResult<T> {
    let value: serde_json::Value = serde_yaml::from_str(text)?;
    Ok(serde_json::from_value(value)?)
}

/// The committed samples parse and fit this test (a static source, pods
/// selected by labels): checked without a cluster, so a sample change that
/// would break the e2e test fails everywhere.
#[test]
fn samples_fit_the_e2e_test() {
    let fx = Fixture::from_samples("e2e").unwrap();
    assert!(
        fx.shards >= PODS,
        "the static sample should have at least {PODS} partitions"
    );
    assert_eq!(
        fx.group.spec.pool_ref.name,
        fx.pool.name_any(),
        "the sample ShardGroup must use the sample pool"
    );
    assert!(!fx.pod_labels.is_empty());
    let load = Fixture::from_sample_group("e2e", "shardgroup-throughput.yaml").unwrap();
    assert!(load.shards >= PODS);
    assert_eq!(load.group.spec.pool_ref.name, load.pool.name_any());
}
