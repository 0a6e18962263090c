//! No new import circle between the workspace's files:
//! `scripts/import-circles.py` with the known ones of
//! `scripts/import-circles.allow` (a pure text scan, well under a second).
//! Skipped, saying so, without a Python interpreter, unless
//! `SHARDRING_REQUIRE_TOOLS` is set (as CI sets it).

use std::path::Path;

#[test]
fn no_import_circle_beyond_the_known_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let Some(output) = crate::python_script(
        "scripts/import-circles.py",
        &[
            "--allow".as_ref(),
            root.join("scripts/import-circles.allow").as_os_str(),
            root.as_os_str(),
        ],
    ) else {
        return;
    };
    assert!(
        output.status.success(),
        "new import circles between files:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
