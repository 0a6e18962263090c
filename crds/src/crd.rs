//! Rendering of the CustomResourceDefinitions as YAML: the single source for
//! `shardring crds`, the committed files under `config/crd/bases/` (checked
//! for drift by `tests/it/generated.rs`) and the Helm chart's copy of them
//! (checked by the operator's `tests/it/manifests/chart.rs`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{ConsumerPool, ShardGroup};

/// Both CRDs, ConsumerPool first (ShardGroups reference pools).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![ConsumerPool::crd(), ShardGroup::crd()]
}

/// One CRD as a YAML document (no leading `---`).
pub fn render(crd: &CustomResourceDefinition) -> String {
    serde_yaml::to_string(crd).expect("a CustomResourceDefinition always serializes to YAML")
}

/// The committed file name of a CRD, kubebuilder style: `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// Every CRD with its file name, in [`crds`] order.
pub fn crd_files() -> Vec<(String, String)> {
    crds()
        .iter()
        .map(|crd| (file_name(crd), render(crd)))
        .collect()
}

/// Both CRDs as one multi-document YAML stream, `---` separated, ConsumerPool first.
pub fn crd_yaml() -> String {
    crds()
        .iter()
        .map(|crd| format!("---\n{}", render(crd)))
        .collect()
}
