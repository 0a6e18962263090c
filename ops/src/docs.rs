//! What `docs/operations.md` documents: the metric names of its "Metrics"
//! section and the runbook headings of its "Alerts" section, so tests can
//! hold the alert rules, the dashboard and a running operator's `/metrics`
//! to what a person reads.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::tools::workspace_root;

/// Where the operations guide is.
pub fn path() -> PathBuf {
    workspace_root().join("docs/operations.md")
}

/// The guide's text.
///
/// # Errors
/// When it cannot be read.
pub fn read() -> Result<String, String> {
    std::fs::read_to_string(path()).map_err(|e| format!("reading {}: {e}", path().display()))
}

/// The `## ` section titled `title` (up to the next `## `).
fn section<'a>(text: &'a str, title: &str) -> &'a str {
    let heading = format!("\n## {title}\n");
    let Some(start) = text.find(&heading) else {
        return "";
    };
    let body = &text[start + heading.len()..];
    body.find("\n## ").map_or(body, |end| &body[..end])
}

/// Every `shardring_…` name in `text`: metric names, with the sample
/// suffixes of histograms (`_bucket`, `_sum`, `_count`) taken off.
pub fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("shardring_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].trim_end_matches('_');
        rest = &tail[end..];
        if name == "shardring" {
            // The prefix on its own (`shardring_` in prose), no metric.
            continue;
        }
        let name = ["_bucket", "_sum", "_count"]
            .into_iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        names.insert(name.to_owned());
    }
    names
}

/// The metric names the "Metrics" section documents.
pub fn documented_metrics(guide: &str) -> BTreeSet<String> {
    metric_names(section(guide, "Metrics"))
}

/// The `### ` headings of the "Alerts" section (the runbooks).
pub fn runbooks(guide: &str) -> BTreeSet<String> {
    section(guide, "Alerts")
        .lines()
        .filter_map(|line| line.strip_prefix("### "))
        .map(|title| title.trim().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_without_their_histogram_suffixes() {
        let names = metric_names(
            "rate(shardring_handoff_duration_seconds_bucket[5m]) / shardring_group_ready{a=\"b\"} and `shardring_x_total`",
        );
        let want: BTreeSet<String> = [
            "shardring_handoff_duration_seconds",
            "shardring_group_ready",
            "shardring_x_total",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(names, want);
    }

    #[test]
    fn sections_end_at_the_next_one() {
        let guide = "# T\n\n## Metrics\n`shardring_a`\n### Sub\n`shardring_b`\n## Alerts\n### AlertOne\n`shardring_c`\n";
        assert_eq!(documented_metrics(guide).len(), 2);
        assert_eq!(
            runbooks(guide).into_iter().collect::<Vec<_>>(),
            ["AlertOne"]
        );
    }
}
