//! The admission policy (`config/policy/admission_policy.yaml`, rendered
//! into `deploy/install.yaml` and by the chart) names what the operator's
//! code writes: a renamed annotation prefix, label, ConfigMap key, finalizer
//! or Secret would otherwise be denied on a real cluster only. The chart's
//! `admissionPolicy.*` values reach it, and the NetworkPolicy sample selects
//! the operator's pods and admits its two ports.

use serde::Deserialize;
use serde_json::Value;

use shardring::crds::FINALIZER;
use shardring::crds::assignment::{ANNOTATION_PREFIX, CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY};
use shardring::crds::endpoint::{CA_CONFIGMAP_KEY, CA_CONFIGMAP_NAME, LEADER_LABEL};

use super::helm_render::run_helm;
use super::{read, root};

/// The objects of a multi-document YAML text, as JSON.
pub(super) fn objects(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| Value::deserialize(document).expect("YAML parses"))
        .filter(|object| !object.is_null())
        .collect()
}

fn policy_text() -> String {
    read(&root().join("config/policy/admission_policy.yaml"))
}

#[test]
fn the_policy_names_what_the_operator_writes() {
    let policy = policy_text();
    let group_label = "shardring.io/shard-group";
    let managed_by = "app.kubernetes.io/managed-by";
    let written = [
        ANNOTATION_PREFIX,
        LEADER_LABEL,
        CA_CONFIGMAP_NAME,
        CA_CONFIGMAP_KEY,
        CONFIGMAP_KEY,
        CONFIGMAP_GZIP_KEY,
        FINALIZER,
        group_label,
        managed_by,
        "shardring-endpoint-selfsigned",
        "authentication.kubernetes.io/pod-name",
    ];
    for name in written {
        assert!(
            policy.contains(&format!("'{name}'")) || policy.contains(&format!("\"{name}\"")),
            "config/policy/admission_policy.yaml does not name {name}, which the operator writes"
        );
    }
    // The names the policy relies on are the code's.
    let source = read(&root().join("operator/src/controller/apply/names.rs"));
    assert!(
        source.contains(&format!("\"{group_label}\"")),
        "GROUP_LABEL"
    );
    assert!(
        source.contains(&format!("\"{managed_by}\"")),
        "MANAGED_BY_LABEL"
    );
    let secret = read(&root().join("endpoint/src/selfsigned.rs"));
    assert!(
        secret.contains("\"shardring-endpoint-selfsigned\""),
        "the self-signed Secret"
    );
}

#[test]
fn chart_admission_policy_values_reach_the_policy() {
    let off = run_helm(&[
        "template",
        "shardring",
        "deploy/helm/shardring",
        "--namespace",
        "shardring-system",
        "--set",
        "admissionPolicy.enabled=false",
    ]);
    assert!(
        !off.contains("kind: ValidatingAdmissionPolicy"),
        "admissionPolicy.enabled=false still renders the policy"
    );
    let custom = run_helm(&[
        "template",
        "orders",
        "deploy/helm/shardring",
        "--namespace",
        "ops",
        "--set",
        "admissionPolicy.annotationPrefixes={assignment.shardring.io/,example.com/}",
    ]);
    let rendered = objects(&custom);
    let policy = rendered
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .expect("the chart renders the policy");
    assert_eq!(
        policy["metadata"]["name"],
        "orders-shardring-operator-writes"
    );
    let variable = |name: &str| {
        policy["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))["expression"]
            .clone()
    };
    assert_eq!(
        variable("annotationPrefixes"),
        r#"["assignment.shardring.io/","example.com/"]"#
    );
    assert_eq!(variable("operatorNamespace"), "'ops'");
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:ops:orders-shardring'"
    );
    let binding = rendered
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
        .expect("the chart renders the binding");
    assert_eq!(
        binding["spec"]["policyName"],
        "orders-shardring-operator-writes"
    );
    assert_eq!(binding["spec"]["validationActions"][0], "Deny");
}

#[test]
fn network_policy_sample_selects_the_operator_and_admits_its_ports() {
    let sample = objects(&read(
        &root().join("config/samples/endpoint-networkpolicy.yaml"),
    ));
    let install = objects(&read(&root().join("deploy/install.yaml")));
    let deployment = install
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("install.yaml has the Deployment");
    let template = &deployment["spec"]["template"];
    let labels = template["metadata"]["labels"].as_object().unwrap();
    let policy = &sample[0];
    assert_eq!(policy["kind"], "NetworkPolicy");
    assert_eq!(
        policy["metadata"]["namespace"],
        deployment["metadata"]["namespace"]
    );
    for (key, value) in policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            labels.get(key),
            Some(value),
            "the sample selects {key}={value}"
        );
    }
    let ports: Vec<i64> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["ports"].as_array().unwrap().iter())
        .map(|port| port["port"].as_i64().unwrap())
        .collect();
    let container_port = |name: &str| {
        template["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no port {name}"))["containerPort"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(ports, [container_port("endpoint"), container_port("http")]);
    let typed =
        super::install::round_trip::<k8s_openapi::api::networking::v1::NetworkPolicy>(policy);
    assert_eq!(
        super::install::first_difference(policy, &typed, ""),
        None,
        "the sample has a field NetworkPolicy does not know"
    );
}
