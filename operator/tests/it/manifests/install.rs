//! `deploy/install.yaml`: byte for byte what `kubectl kustomize
//! config/default` renders (kubectl from PATH or `$KUBECTL`), and every
//! object in it valid for its typed API (a field the type does not know,
//! such as a misspelt security setting, shows up as a difference).

use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;

use super::{read, root};

/// `kubectl`, or `$KUBECTL` when set.
fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

#[test]
fn install_manifest_matches_kustomize_render() {
    let root = root();
    let output = Command::new(kubectl())
        .args(["kustomize", "config/default"])
        .current_dir(&root)
        .output();
    let output = match output {
        Ok(output) => output,
        Err(error) => panic!(
            "cannot run `{} kustomize` ({error}): this drift test needs kubectl (with its built-in kustomize) \
             on PATH, or its path in $KUBECTL",
            kubectl()
        ),
    };
    assert!(
        output.status.success(),
        "`kubectl kustomize config/default` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered = String::from_utf8(output.stdout).expect("kustomize prints UTF-8");
    let committed = read(&root.join("deploy/install.yaml"));
    assert!(
        rendered == committed,
        "deploy/install.yaml differs from its sources in config/: run `kubectl kustomize config/default > deploy/install.yaml`"
    );
    for document in serde_yaml::Deserializer::from_str(&rendered) {
        let object = Value::deserialize(document).expect("rendered YAML parses");
        let kind = object["kind"].as_str().unwrap_or_default();
        assert!(
            kind != "ShardGroup" && kind != "ConsumerPool",
            "config/default must not include samples, but renders a {kind}"
        );
    }
}

/// Deserializes `object` as `K` and serializes it back: a field that `K` does
/// not know (a typo such as `readOnlyRootFileSystem`) is dropped on the way
/// and shows up as a difference.
pub(super) fn round_trip<K: serde::de::DeserializeOwned + serde::Serialize>(
    object: &serde_json::Value,
) -> serde_json::Value {
    let typed: K =
        serde_json::from_value(object.clone()).unwrap_or_else(|error| panic!("{object}: {error}"));
    serde_json::to_value(typed).expect("a typed object serializes")
}

/// Where two JSON values first differ (numbers compare by value, so `1` and
/// `1.0` are equal), or `None`.
pub(super) fn first_difference(
    a: &serde_json::Value,
    b: &serde_json::Value,
    path: &str,
) -> Option<String> {
    use serde_json::Value as J;
    match (a, b) {
        (J::Number(x), J::Number(y)) => {
            (x.as_f64() != y.as_f64()).then(|| format!("{path}: {x} vs {y}"))
        }
        (J::Object(x), J::Object(y)) => {
            x.keys()
                .chain(y.keys())
                .find_map(|key| match (x.get(key), y.get(key)) {
                    (Some(u), Some(v)) => first_difference(u, v, &format!("{path}.{key}")),
                    (u, v) => Some(format!("{path}.{key}: {u:?} vs {v:?}")),
                })
        }
        (J::Array(x), J::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(u, v, &format!("{path}[{i}]"))),
        _ => (a != b).then(|| format!("{path}: {a} vs {b}")),
    }
}

#[test]
fn install_manifest_objects_are_schema_valid() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    let install = read(&root().join("deploy/install.yaml"));
    let mut kinds = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&install) {
        let object: serde_json::Value =
            serde_json::Value::deserialize(document).expect("install.yaml parses");
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let again = match kind.as_str() {
            "Namespace" => round_trip::<Namespace>(&object),
            "ServiceAccount" => round_trip::<ServiceAccount>(&object),
            "Service" => round_trip::<Service>(&object),
            "Deployment" => round_trip::<Deployment>(&object),
            "Role" => round_trip::<Role>(&object),
            "ClusterRole" => round_trip::<ClusterRole>(&object),
            "RoleBinding" => round_trip::<RoleBinding>(&object),
            "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(&object),
            "CustomResourceDefinition" => round_trip::<CustomResourceDefinition>(&object),
            "ValidatingAdmissionPolicy" => round_trip::<ValidatingAdmissionPolicy>(&object),
            "ValidatingAdmissionPolicyBinding" => {
                round_trip::<ValidatingAdmissionPolicyBinding>(&object)
            }
            other => panic!("deploy/install.yaml has an unexpected {other}"),
        };
        if let Some(difference) = first_difference(&object, &again, "") {
            panic!(
                "{kind} {} has a field its schema does not know: {difference}",
                object["metadata"]["name"]
            );
        }
        kinds.push(kind);
    }
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "Namespace",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
}
