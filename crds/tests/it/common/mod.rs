//! Shared helpers of the tests: compare generated text with a committed file,
//! or rewrite the file when `SHARDRING_UPDATE_GOLDEN=1`; a CRD's schema as CEL
//! rules are evaluated against; realistic documents in `fixtures.rs`.

pub mod fixtures;

use std::path::{Path, PathBuf};

use kube::CustomResourceExt;

/// Environment variable that makes the tests rewrite committed files instead of
/// comparing them.
pub const UPDATE_ENV: &str = "SHARDRING_UPDATE_GOLDEN";

/// A path relative to the workspace root (the crate's parent directory).
pub fn workspace_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crds/ has a parent")
        .join(relative)
}

/// The `openAPIV3Schema` of `K`'s CRD (its one version) as JSON: what the
/// API server, and kube's CEL validator here, evaluate the rules against.
pub fn open_api_schema<K: CustomResourceExt>() -> serde_json::Value {
    let crd = K::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|validation| validation.open_api_v3_schema.as_ref())
        .expect("the CRD has an openAPIV3Schema");
    serde_json::to_value(schema).expect("a schema serialises")
}

/// Asserts that the committed file at `relative` (from the workspace root)
/// equals `expected` byte for byte; with `SHARDRING_UPDATE_GOLDEN=1` writes it.
pub fn check_file(relative: &str, expected: &str) {
    let path = workspace_path(relative);
    if std::env::var(UPDATE_ENV).is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("file has a parent"))
            .expect("create parent directory");
        std::fs::write(&path, expected)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == expected,
        "{relative} is out of date with the Rust types.\n\
         Regenerate every committed CRD, schema and golden file with:\n\
         \n    SHARDRING_UPDATE_GOLDEN=1 cargo test -p shardring-crds\n\n\
         then review and commit the diff."
    );
}
