//! No new import circle between the workspace's files:
//! `scripts/import-circles.py` with the known ones of
//! `scripts/import-circles.allow` (a pure text scan, well under a second).
//! Skipped, saying so, without a Python interpreter, unless
//! `SHARDRING_REQUIRE_TOOLS` is set (as CI sets it).

use std::path::Path;
use std::process::Command;

#[test]
fn no_import_circle_beyond_the_known_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var("SHARDRING_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let output = match Command::new(&python)
        .arg(root.join("scripts/import-circles.py"))
        .arg("--allow")
        .arg(root.join("scripts/import-circles.allow"))
        .arg(&root)
        .output()
    {
        Ok(output) => output,
        Err(error) if std::env::var_os("SHARDRING_REQUIRE_TOOLS").is_none() => {
            eprintln!("SKIPPED: no Python interpreter ({python}: {error})");
            return;
        }
        Err(error) => panic!("{python}: {error}"),
    };
    assert!(
        output.status.success(),
        "new import circles between files:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
