//! The figures of `docs/benchmarks.md` stay writable by
//! `scripts/bench-record.py`: every block is well formed (`--check`), and
//! the script records a command's output into a block, with its date and
//! command, and leaves the file alone when the command fails. Skipped,
//! saying so, without a Python interpreter, unless `SHARDRING_REQUIRE_TOOLS`
//! is set (as CI sets it).

use std::path::PathBuf;
use std::process::Output;

fn script(args: &[&str]) -> Option<Output> {
    crate::python_script("scripts/bench-record.py", args)
}

fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn every_figures_block_of_the_benchmarks_doc_is_well_formed() {
    let Some(output) = script(&["--check"]) else {
        return;
    };
    assert!(output.status.success(), "{}", said(&output));
}

#[test]
fn a_bench_is_recorded_into_its_block_and_a_failed_one_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file: PathBuf = dir.join("benchmarks.md");
    let before = "# Measurements\n\n<!-- figures: demo | printf 'old\\n' -->\n\
                  Recorded on 2000-01-01 at `x`, on a machine:\n`printf`\n<!-- /figures -->\n\n\
                  <!-- figures: other | true -->\nRecorded on 2000-01-01\n<!-- /figures -->\n";
    std::fs::write(&file, before).expect("write");
    let path = file.to_str().expect("utf-8 path");

    let Some(output) = script(&[
        "--file",
        path,
        "demo",
        "--",
        "printf '| a | b |\\n2026-12-07T05:11:02.378676Z  WARN op: logged\\n|---|---|\\n| 1 | 2 |\\n'",
    ]) else {
        return;
    };
    assert!(output.status.success(), "{}", said(&output));
    let after = std::fs::read_to_string(&file).expect("read");
    let block = after
        .split("<!-- figures: demo")
        .nth(1)
        .and_then(|rest| rest.split("<!-- /figures -->").next())
        .expect("the demo block");
    // The output verbatim, but for the log record between its lines.
    assert!(
        block.contains("```text\n| a | b |\n|---|---|\n| 1 | 2 |\n```"),
        "{after}"
    );
    assert!(!block.contains("2000-01-01"), "the old date stays: {after}");
    assert!(block.contains("Recorded on 20"), "{after}");
    assert!(
        block.contains("`printf '| a | b |"),
        "the command run: {after}"
    );
    assert!(
        after.contains("<!-- figures: other | true -->\nRecorded on 2000-01-01\n"),
        "another block changed: {after}"
    );

    let recorded = after.clone();
    let failed = script(&["--file", path, "demo", "--", "echo half; exit 3"]).expect("ran");
    assert!(!failed.status.success(), "{}", said(&failed));
    assert_eq!(std::fs::read_to_string(&file).expect("read"), recorded);

    let unknown = script(&["--file", path, "nope"]).expect("ran");
    assert!(!unknown.status.success());
    assert!(
        said(&unknown).contains("blocks: demo, other"),
        "{}",
        said(&unknown)
    );

    // A block the script could no longer update fails the check.
    std::fs::write(
        &file,
        "<!-- figures: open | true -->\nRecorded on 2000-01-01\n",
    )
    .expect("write");
    let broken = script(&["--file", path, "--check"]).expect("ran");
    assert!(!broken.status.success(), "{}", said(&broken));
    assert!(
        said(&broken).contains("block `open` has no"),
        "{}",
        said(&broken)
    );
    std::fs::remove_dir_all(&dir).ok();
}
