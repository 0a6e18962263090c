//! The consumer endpoint's deployment (issue 13): the leader-only Service, the
//! Deployment's port, certificate volume and downward-API identity, the RBAC
//! the endpoint needs, the chart's `endpoint.*` values, and the sample
//! consumer that reaches the endpoint — each checked against the others, so
//! a renamed port, Service, audience or path fails here rather than in a
//! cluster.

use serde::Deserialize;
use serde_json::{Value, json};

use super::command_line::{parse_run_args, run_flag_default};
use super::helm_render::run_helm;
use super::install::{first_difference, round_trip};
use super::{read, root};

// The label the leader puts on its own pod (selected by the Service), and the
// token audience the endpoint expects unless told otherwise: the wire
// contract's constants, so the manifests follow them.
use shardring::crds::endpoint::{DEFAULT_AUDIENCE, LEADER_LABEL};

/// Where the operator reads the endpoint's certificate (`--endpoint-tls-dir`).
const TLS_DIR: &str = "/etc/shardring/endpoint-tls";
/// The ConfigMap of the endpoint's CA in every namespace with a ShardGroup.
const CA_CONFIGMAP: &str = "shardring-endpoint-ca";

/// The objects of a multi-document YAML text, as JSON.
fn objects(text: &str, what: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| {
            Value::deserialize(document).unwrap_or_else(|error| panic!("{what}: {error}"))
        })
        .filter(|object| !object.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn install() -> Vec<Value> {
    objects(
        &read(&root().join("deploy/install.yaml")),
        "deploy/install.yaml",
    )
}

/// The chart rendered by helm as release `release` in `namespace`.
fn chart(release: &str, namespace: &str, set: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        release,
        "deploy/helm/shardring",
        "--namespace",
        namespace,
    ];
    for value in set {
        args.extend(["--set", value]);
    }
    objects(&run_helm(&args), "helm template")
}

fn strs(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The operator's container and its `run` arguments (without `run`).
fn manager(deployment: &Value) -> (&Value, Vec<&str>) {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args = strs(&container["args"]);
    assert_eq!(args.first(), Some(&"run"));
    (container, args[1..].to_vec())
}

/// The value of `--flag=value` or `--flag value` in `args`.
fn flag_value<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(at, arg)| {
        let rest = arg.strip_prefix(flag)?;
        match rest.strip_prefix('=') {
            Some(value) => Some(value),
            None if rest.is_empty() => args.get(at + 1).copied(),
            None => None,
        }
    })
}

fn endpoint_flags<'a>(args: &[&'a str]) -> Vec<&'a str> {
    args.iter()
        .copied()
        .filter(|arg| arg.starts_with("--endpoint-") || *arg == "--no-endpoint")
        .collect()
}

#[test]
fn flag_values_are_found_in_both_spellings() {
    let args = ["--a=1", "--b", "2", "--bc=3"];
    assert_eq!(flag_value(&args, "--a"), Some("1"));
    assert_eq!(flag_value(&args, "--b"), Some("2"));
    assert_eq!(flag_value(&args, "--bc"), Some("3"));
    assert_eq!(flag_value(&args, "--c"), None);
}

/// The Service selects the operator's pods and the leader label, so only the
/// leader receives consumers' requests, on its `endpoint` port.
fn assert_leader_service(service: &Value, deployment: &Value, what: &str) {
    let spec = &service["spec"];
    let mut expected = deployment["spec"]["selector"]["matchLabels"].clone();
    expected[LEADER_LABEL] = json!("true");
    assert_eq!(
        spec["selector"], expected,
        "{what}: the endpoint Service must select the operator's pods and {LEADER_LABEL}=true"
    );
    let template_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in spec["selector"].as_object().expect("selector") {
        if key != LEADER_LABEL {
            assert_eq!(
                &template_labels[key], value,
                "{what}: pods lack selector label {key}"
            );
        }
    }
    assert!(
        template_labels.get(LEADER_LABEL).is_none(),
        "{what}: every pod would be selected if the template carried {LEADER_LABEL}"
    );
    assert_eq!(spec["publishNotReadyAddresses"], json!(false), "{what}");
    assert_eq!(
        spec["ports"],
        json!([{"name": "https", "port": 443, "targetPort": "endpoint", "protocol": "TCP"}]),
        "{what}"
    );
    let (container, _) = manager(deployment);
    let port = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|port| port["name"] == "endpoint")
        .unwrap_or_else(|| panic!("{what}: the container has no port `endpoint`"));
    assert_eq!(port["containerPort"], json!(8443), "{what}");
    if let Some(addr) = run_flag_default("endpoint-addr") {
        assert!(
            addr.ends_with(":8443"),
            "`shardring run` listens on {addr} by default, the port `endpoint` is 8443"
        );
    }
}

/// The certificate Secret is mounted, optional, where the operator reads it;
/// returns its name.
fn assert_tls_volume<'a>(deployment: &'a Value, what: &str) -> &'a str {
    let pod = &deployment["spec"]["template"]["spec"];
    let (container, _) = manager(deployment);
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|mount| mount["mountPath"] == TLS_DIR)
        .unwrap_or_else(|| panic!("{what}: nothing mounted at {TLS_DIR}"));
    assert_eq!(mount["readOnly"], json!(true), "{what}");
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|volume| volume["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(
        volume["secret"]["optional"],
        json!(true),
        "{what}: without the Secret the operator falls back to its own CA, so it must be optional"
    );
    if let Some(dir) = run_flag_default("endpoint-tls-dir") {
        assert_eq!(dir, TLS_DIR, "`shardring run`'s default --endpoint-tls-dir");
    }
    volume["secret"]["secretName"].as_str().expect("secretName")
}

#[test]
fn install_routes_the_endpoint_to_the_leader_and_mounts_its_certificate() {
    let install = install();
    let deployment = find(&install, "Deployment", "shardring");
    let service = find(&install, "Service", "shardring-endpoint");
    assert_eq!(service["metadata"]["namespace"], "shardring-system");
    assert_leader_service(service, deployment, "deploy/install.yaml");
    assert_eq!(
        assert_tls_volume(deployment, "deploy/install.yaml"),
        "shardring-endpoint-tls"
    );

    // The leader patches its own pod, found by POD_NAME/POD_NAMESPACE.
    let (container, args) = manager(deployment);
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let env = container["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|env| env["name"] == name)
            .unwrap_or_else(|| panic!("the manager has no env {name}"));
        assert_eq!(env["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    assert!(
        !args.contains(&"--no-endpoint"),
        "the install serves the endpoint"
    );
    let audience = flag_value(&args, "--endpoint-audience").expect("--endpoint-audience");
    assert_eq!(
        audience, DEFAULT_AUDIENCE,
        "the install's audience is the wire contract's default"
    );
    if let Some(default) = run_flag_default("endpoint-audience") {
        assert_eq!(
            default, DEFAULT_AUDIENCE,
            "`shardring run`'s default audience"
        );
    }
}

fn rule_grants(rule: &Value, group: &str, resource: &str, verb: &str) -> bool {
    strs(&rule["apiGroups"]).contains(&group)
        && strs(&rule["resources"]).contains(&resource)
        && strs(&rule["verbs"]).contains(&verb)
}

#[test]
fn install_grants_what_the_endpoint_needs_and_no_more() {
    let install = install();
    let cluster_rules = find(&install, "ClusterRole", "shardring")["rules"]
        .as_array()
        .expect("rules")
        .clone();
    for (group, resource, verb) in [
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("", "pods", "patch"),
        ("", "configmaps", "create"),
        ("", "configmaps", "update"),
        ("", "configmaps", "patch"),
    ] {
        assert!(
            cluster_rules
                .iter()
                .any(|rule| rule_grants(rule, group, resource, verb)
                    && rule.get("resourceNames").is_none()),
            "the ClusterRole does not grant {verb} on {resource} ({group:?})"
        );
    }
    assert!(
        !cluster_rules
            .iter()
            .any(|rule| strs(&rule["resources"]).contains(&"secrets")),
        "Secrets are granted in the operator's namespace only"
    );

    let role = find(&install, "Role", "shardring-endpoint");
    assert_eq!(role["metadata"]["namespace"], "shardring-system");
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": [""], "resources": ["secrets"],
             "resourceNames": ["shardring-endpoint-selfsigned"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}
        ])
    );
    let binding = find(&install, "RoleBinding", "shardring-endpoint");
    assert_eq!(binding["metadata"]["namespace"], "shardring-system");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "shardring-endpoint"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "shardring", "namespace": "shardring-system"}])
    );
}

#[test]
fn chart_without_the_endpoint_runs_with_no_endpoint_and_drops_its_objects() {
    let rendered = chart("shardring", "shardring-system", &["endpoint.enabled=false"]);
    for object in &rendered {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            !name.ends_with("-endpoint"),
            "endpoint.enabled=false still renders {} {name}",
            object["kind"]
        );
    }
    let deployment = find(&rendered, "Deployment", "shardring");
    let (container, args) = manager(deployment);
    assert_eq!(endpoint_flags(&args), ["--no-endpoint"]);
    parse_run_args(&args, "the chart with endpoint.enabled=false");
    assert!(
        !container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|port| port["name"] == "endpoint")
    );
    assert!(container.get("volumeMounts").is_none());
    assert!(
        deployment["spec"]["template"]["spec"]
            .get("volumes")
            .is_none()
    );
}

#[test]
fn chart_endpoint_values_reach_the_operator_and_the_certificate() {
    let rendered = chart(
        "orders",
        "ops",
        &[
            "endpoint.tlsSecretName=endpoint-cert",
            "endpoint.audience=orders.example.com",
            "endpoint.peerIpCheck=false",
            "endpoint.certManager.enabled=true",
            "endpoint.certManager.issuerRef.name=internal-ca",
            "endpoint.certManager.issuerRef.kind=ClusterIssuer",
            "endpoint.limits.tokenCacheTtl=2m",
            "endpoint.limits.ipLimit=40",
            "endpoint.limits.podLimit=20",
            "endpoint.limits.rateWindow=10s",
            "endpoint.limits.maxConnections=2048",
        ],
    );
    let deployment = find(&rendered, "Deployment", "orders-shardring");
    let service = find(&rendered, "Service", "orders-shardring-endpoint");
    assert_leader_service(service, deployment, "the chart");
    let secret = assert_tls_volume(deployment, "the chart");
    assert_eq!(secret, "endpoint-cert");

    let (_, args) = manager(deployment);
    assert_eq!(
        endpoint_flags(&args),
        [
            "--endpoint-audience=orders.example.com",
            "--endpoint-dns-name=orders-shardring-endpoint.ops.svc",
            "--endpoint-no-peer-ip-check",
            "--endpoint-token-cache-ttl=2m",
            "--endpoint-ip-limit=40",
            "--endpoint-pod-limit=20",
            "--endpoint-rate-window=10s",
            "--endpoint-max-connections=2048",
        ]
    );
    parse_run_args(&args, "the chart with every endpoint value set");

    let certificate = find(&rendered, "Certificate", "orders-shardring-endpoint");
    assert_eq!(certificate["apiVersion"], "cert-manager.io/v1");
    assert_eq!(certificate["metadata"]["namespace"], "ops");
    let spec = &certificate["spec"];
    assert_eq!(
        spec["secretName"], secret,
        "cert-manager must write the Secret the Deployment mounts"
    );
    assert_eq!(
        strs(&spec["dnsNames"]),
        [
            "orders-shardring-endpoint",
            "orders-shardring-endpoint.ops",
            "orders-shardring-endpoint.ops.svc",
            "orders-shardring-endpoint.ops.svc.cluster.local",
        ]
    );
    assert_eq!(
        spec["issuerRef"],
        json!({"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    );
    for object in &rendered {
        assert!(
            object["kind"] != "Role" || object["metadata"]["namespace"] == "ops",
            "the chart's Roles belong in the release namespace"
        );
    }
}

#[test]
fn chart_default_release_renders_no_certificate_or_dns_name() {
    let rendered = chart("shardring", "shardring-system", &[]);
    assert!(
        !rendered
            .iter()
            .any(|object| object["kind"] == "Certificate"),
        "cert-manager is off by default"
    );
    let (_, args) = manager(find(&rendered, "Deployment", "shardring"));
    assert_eq!(
        endpoint_flags(&args),
        [format!("--endpoint-audience={DEFAULT_AUDIENCE}")],
        "the default release's Service is shardring-endpoint, the operator's default name"
    );
}

#[test]
fn consumer_sample_reaches_the_endpoint_with_its_token_and_ca() {
    let path = root().join("config/samples/consumer-endpoint.yaml");
    let sample = objects(&read(&path), "config/samples/consumer-endpoint.yaml");
    let deployment = find(&sample, "Deployment", "clicks-consumer");
    if let Some(difference) = first_difference(
        deployment,
        &round_trip::<k8s_openapi::api::apps::v1::Deployment>(deployment),
        "",
    ) {
        panic!("the sample Deployment has a field its schema does not know: {difference}");
    }
    let pod = &deployment["spec"]["template"]["spec"];
    let account = find(&sample, "ServiceAccount", "clicks-consumer");
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);

    // The pool of the samples selects these pods.
    let pool: Value = serde_yaml::from_str(&read(&root().join("config/samples/consumerpool.yaml")))
        .expect("consumerpool.yaml");
    for (key, value) in pool["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(
            &deployment["spec"]["template"]["metadata"]["labels"][key],
            value
        );
    }

    // The projected volume: a token for the operator's audience and the CA
    // ConfigMap the operator publishes.
    let install = install();
    let (_, operator_args) = manager(find(&install, "Deployment", "shardring"));
    let audience = flag_value(&operator_args, "--endpoint-audience").expect("audience");
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|volume| volume.get("projected").is_some())
        .expect("a projected volume");
    assert_eq!(
        volume["projected"]["sources"],
        json!([
            {"serviceAccountToken": {"audience": audience, "expirationSeconds": 3600, "path": "token"}},
            {"configMap": {"name": CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
        ])
    );
    let container = &pod["containers"][0];
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|mount| mount["name"] == volume["name"])
        .expect("the projected volume is mounted");
    let dir = mount["mountPath"].as_str().expect("mountPath");
    assert_eq!(dir, "/var/run/secrets/shardring.io");
    assert_eq!(mount["readOnly"], json!(true));

    // The consumer's arguments name the Service of the install, and the files.
    let args = strs(&container["args"]);
    let service = find(&install, "Service", "shardring-endpoint");
    assert_eq!(
        flag_value(&args, "--endpoint-url"),
        Some(
            format!(
                "https://{}.{}.svc",
                service["metadata"]["name"].as_str().unwrap(),
                service["metadata"]["namespace"].as_str().unwrap()
            )
            .as_str()
        )
    );
    assert_eq!(
        flag_value(&args, "--endpoint-token-file"),
        Some(format!("{dir}/token").as_str())
    );
    assert_eq!(
        flag_value(&args, "--endpoint-ca-file"),
        Some(format!("{dir}/ca.crt").as_str())
    );
}
