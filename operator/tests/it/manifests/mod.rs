//! Drift tests of the packaging: `deploy/install.yaml` must equal what
//! `kubectl kustomize config/default` renders; the Helm chart's CRDs must equal
//! the generated ones in `config/crd/bases/`; its ClusterRole and security
//! settings must match the kustomize bases; every `.Values.x.y` its
//! templates use must exist in `values.yaml`; and the chart, linted and
//! rendered by a real helm with its default values, must install what
//! `deploy/install.yaml` installs (helm from PATH or `$HELM`).
//!
//! By artefact: `install` (the rendered manifest), `chart` (the chart's
//! files against the kustomize bases), `command_line` (both manifests'
//! command lines against `shardring run`'s parser), `helm_render` (the
//! chart rendered by helm), `rbac` (the chart's RBAC values), `monitoring` (the optional PrometheusRule and dashboard), `endpoint` (the consumer endpoint's Service,
//! volume, RBAC, chart values and sample consumer against each other). The
//! files they all read are found here.

mod chart;
mod command_line;
mod endpoint;
mod helm_render;
mod install;
mod monitoring;
mod policy;
mod rbac;

use std::path::{Path, PathBuf};

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
