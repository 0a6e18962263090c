//! The Helm chart's files against the kustomize bases: its CRDs equal the
//! generated ones, every `.Values.x.y` its templates use is defined in
//! `values.yaml`, and the manager's hardening and defaults match (its RBAC
//! is rendered and checked in `rbac`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::Value;

use super::{read, root, yaml};

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
