//! Runs Prometheus's `promtool` on rule files: `promtool check rules`
//! (the file parses, every expression and template is valid) and
//! `promtool test rules` (the unit tests beside the rules pass). A failure
//! carries promtool's own output, which names the rule, the evaluation time
//! and the alerts it expected and got.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Errors of running promtool.
#[derive(Debug, thiserror::Error)]
pub enum PromtoolError {
    /// promtool could not be started at all.
    #[error(
        "cannot run {} ({source}): install Debian's prometheus package, or set $PROMTOOL to promtool's path",
        program.display()
    )]
    Spawn {
        /// The promtool that was run.
        program: PathBuf,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// promtool ran and refused the file.
    #[error("`{command}` failed ({status}); fix the file it names:\n{output}")]
    Failed {
        /// The command line, for running it by hand.
        command: String,
        /// promtool's exit status.
        status: std::process::ExitStatus,
        /// What promtool printed, stdout then stderr.
        output: String,
    },
}

/// `promtool check rules FILE`: the rules parse and their expressions and
/// annotation templates are valid. Returns promtool's output.
///
/// # Errors
/// [`PromtoolError`] when promtool cannot start or refuses the file.
pub fn check_rules(promtool: &Path, rules: &Path) -> Result<String, PromtoolError> {
    run(promtool, &["check", "rules"], rules)
}

/// `promtool test rules FILE`: the unit tests in `tests` (whose
/// `rule_files` are found relative to it) pass. Returns promtool's output.
///
/// # Errors
/// [`PromtoolError`] when promtool cannot start or a test fails.
pub fn test_rules(promtool: &Path, tests: &Path) -> Result<String, PromtoolError> {
    run(promtool, &["test", "rules"], tests)
}

fn run(promtool: &Path, args: &[&str], file: &Path) -> Result<String, PromtoolError> {
    let output = Command::new(promtool)
        .args(args)
        .arg(file)
        .output()
        .map_err(|source| PromtoolError::Spawn {
            program: promtool.to_path_buf(),
            source,
        })?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    if output.status.success() {
        Ok(text)
    } else {
        Err(PromtoolError::Failed {
            command: format!(
                "{} {} {}",
                promtool.display(),
                args.join(" "),
                file.display()
            ),
            status: output.status,
            output: text,
        })
    }
}
