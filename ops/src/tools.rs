//! The external tools the checks run (`promtool`, `lua5.4`, `prometheus`):
//! where they are, and what a check does when one is missing. A missing
//! tool skips its check with a line that says so, unless
//! `SHARDRING_REQUIRE_TOOLS=1` (set by `.ci/run`, which installs them from
//! Debian), where a missing tool fails the check instead.

use std::path::{Path, PathBuf};

/// The environment variable that turns a missing tool into a failure.
pub const REQUIRE_TOOLS: &str = "SHARDRING_REQUIRE_TOOLS";

/// The workspace's root directory (the artifacts are found from it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// `name` on `PATH` (or the path in the environment variable `override_var`
/// when it is set), if it is there.
pub fn find(name: &str, override_var: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(override_var) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `name` for the check `check`, or `None` after printing
/// `SKIPPED: <check>: <name> is not installed` when it is missing and not
/// required.
///
/// # Panics
/// When the tool is missing and [`REQUIRE_TOOLS`] is `1`: CI installs it,
/// so a missing one there is a broken CI, not a skip.
pub fn find_or_skip(check: &str, name: &str, override_var: &str) -> Option<PathBuf> {
    let found = find(name, override_var);
    if found.is_none() {
        let required = std::env::var(REQUIRE_TOOLS).is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{check}: {name} is not installed (on PATH or ${override_var}) and {REQUIRE_TOOLS}=1; \
             install Debian's package (apt-get install prometheus lua5.4)"
        );
        println!(
            "SKIPPED: {check}: {name} is not installed (apt-get install prometheus lua5.4, or set ${override_var})"
        );
    }
    found
}

/// Whether the chart's `copy` of an artifact is byte for byte its `source`
/// (`scripts/generate.sh` copies them: Helm reads only files inside the
/// chart); `Err` says which differs and how to fix it.
///
/// # Errors
/// When either cannot be read, or they differ.
pub fn chart_copy_drift(source: &Path, copy: &Path) -> Result<(), String> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| {
            format!(
                "cannot read {} ({e}): run ./scripts/generate.sh",
                path.display()
            )
        })
    };
    if read(source)? == read(copy)? {
        Ok(())
    } else {
        Err(format!(
            "{} differs from {}: run ./scripts/generate.sh",
            copy.display(),
            source.display()
        ))
    }
}
