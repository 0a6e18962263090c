//! Drift test of the committed CRD YAML: the one committed copy, the kustomize
//! base `config/crd/bases/`, must equal what `shardring crds` prints.
//!
//! To regenerate after changing the types (writes every committed file this
//! crate checks: CRDs, JSON schemas, golden documents):
//!
//!     SHARDRING_UPDATE_GOLDEN=1 cargo test -p shardring-crds
//!
//! (`cargo run -p shardring -- crds --write config/crd/bases` writes the same
//! CRD files from the binary.)

use shardring_crds::{crd_files, crd_yaml};

use crate::common;

#[test]
fn committed_crds_match_the_types() {
    for (name, yaml) in crd_files() {
        common::check_file(&format!("config/crd/bases/{name}"), &yaml);
    }
}

#[test]
fn kustomization_lists_every_crd() {
    let kustomization =
        std::fs::read_to_string(common::workspace_path("config/crd/kustomization.yaml"))
            .expect("config/crd/kustomization.yaml exists");
    for (name, _) in crd_files() {
        assert!(
            kustomization.contains(&format!("bases/{name}")),
            "config/crd/kustomization.yaml must list bases/{name}"
        );
    }
}

#[test]
fn multi_document_stream_is_consumer_pool_first() {
    let yaml = crd_yaml();
    let docs: Vec<&str> = yaml.split("---\n").filter(|d| !d.is_empty()).collect();
    assert_eq!(docs.len(), 2);
    assert!(docs[0].contains("name: consumerpools.shardring.io"));
    assert!(docs[1].contains("name: shardgroups.shardring.io"));
    for doc in docs {
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_yaml::from_str(doc).expect("each document parses as a CRD");
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "status subresource"
        );
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["shardring".to_owned()][..])
        );
    }
}

#[test]
fn shard_group_printer_columns() {
    let crd = shardring_crds::crd::crds().remove(1);
    let columns: Vec<(String, String)> = crd.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .expect("printer columns")
        .iter()
        .map(|c| (c.name.clone(), c.json_path.clone()))
        .collect();
    let expected = [
        ("Source", ".status.source"),
        ("Shards", ".status.shards.total"),
        ("Pods", ".status.pods.eligible"),
        ("Load", ".status.load"),
        ("Moves", ".status.movesInFlight"),
        ("Held", ".status.shards.held"),
        ("Held-Until", ".status.heldUntil"),
        ("Spread", ".status.throughput.spread"),
        ("Recommended", ".status.recommendedReplicas"),
        ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
        ("Age", ".metadata.creationTimestamp"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(n, p)| ((*n).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(columns, expected);
}

/// Every property of both schemas carries a description, so `kubectl explain`
/// documents every field (a field added without `///` fails here).
#[test]
fn every_field_is_documented() {
    fn walk(path: &str, schema: &serde_json::Value, missing: &mut Vec<String>, seen: &mut usize) {
        if let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) {
            for (name, property) in properties {
                *seen += 1;
                let here = format!("{path}.{name}");
                if property
                    .get("description")
                    .and_then(|d| d.as_str())
                    .is_none_or(str::is_empty)
                {
                    missing.push(here.clone());
                }
                walk(&here, property, missing, seen);
            }
        }
        if let Some(items) = schema.get("items") {
            walk(&format!("{path}[]"), items, missing, seen);
        }
    }
    for crd in shardring_crds::crd::crds() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let (mut missing, mut seen) = (Vec::new(), 0);
        walk(
            &crd.spec.names.kind,
            &schema["openAPIV3Schema"],
            &mut missing,
            &mut seen,
        );
        assert!(
            missing.is_empty(),
            "fields without a description: {missing:?}"
        );
        assert!(
            seen >= 15,
            "{}: only {seen} properties walked",
            crd.spec.names.kind
        );
    }
}
