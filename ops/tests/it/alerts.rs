//! The alert rules (`config/monitoring/alerts.yaml`) and their unit tests
//! (`config/monitoring/alerts_test.yaml`): promtool accepts the rules and
//! passes the tests (and fails them when a rule is broken); every alert has
//! a case where it fires and one where it does not; every alert carries a
//! severity, a summary, a description and its runbook; the chart's copy is
//! the same file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Deserialize;
use shardring_ops::promtool;
use shardring_ops::tools::{find_or_skip, workspace_root};

const RULES: &str = "config/monitoring/alerts.yaml";
const TESTS: &str = "config/monitoring/alerts_test.yaml";
const CHART_COPY: &str = "deploy/helm/shardring/files/alerts.yaml";
const RUNBOOKS: &str = "https://github.com/shardring/shardring/blob/main/docs/operations.md";
const SEVERITIES: [&str; 2] = ["warning", "critical"];

/// A Prometheus rules file, as far as these checks read it.
#[derive(Debug, Deserialize)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Debug, Deserialize)]
struct RuleGroup {
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
struct Rule {
    /// Absent on a recording rule.
    alert: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// A `promtool test rules` file, as far as these checks read it.
#[derive(Debug, Deserialize)]
struct TestFile {
    rule_files: Vec<String>,
    tests: Vec<TestGroup>,
}

#[derive(Debug, Deserialize)]
struct TestGroup {
    #[serde(default)]
    alert_rule_test: Vec<AlertTest>,
}

#[derive(Debug, Deserialize)]
struct AlertTest {
    eval_time: String,
    alertname: String,
    /// Absent or empty: the alert must not fire at `eval_time`.
    #[serde(default)]
    exp_alerts: Vec<ExpectedAlert>,
}

#[derive(Debug, Deserialize)]
struct ExpectedAlert {
    #[serde(default)]
    exp_labels: BTreeMap<String, String>,
}

fn path(relative: &str) -> PathBuf {
    workspace_root().join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(path(relative))
        .unwrap_or_else(|error| panic!("cannot read {relative}: {error}"))
}

fn parse<T: for<'de> Deserialize<'de>>(relative: &str) -> T {
    serde_yaml::from_str(&read(relative))
        .unwrap_or_else(|error| panic!("{relative} is not a valid file of its kind: {error}"))
}

/// The alerting rules of a rules file (one entry per rule: an alert with a
/// warning and a critical threshold appears twice).
fn alerts(file: &RuleFile) -> Vec<(&str, &Rule)> {
    file.groups
        .iter()
        .flat_map(|group| &group.rules)
        .filter_map(|rule| rule.alert.as_deref().map(|name| (name, rule)))
        .collect()
}

/// What keeps the unit tests from covering every alert: an alert (per
/// severity) no case expects to fire, an alert no case expects to stay
/// quiet, and a case naming an alert the rules do not have (it would pass
/// without testing anything).
fn coverage_gaps(rules: &RuleFile, tests: &TestFile) -> Vec<String> {
    let mut gaps = Vec::new();
    if !tests.rule_files.iter().any(|file| file == "alerts.yaml") {
        gaps.push(format!(
            "{TESTS} does not load alerts.yaml (rule_files: {:?})",
            tests.rule_files
        ));
    }
    let defined: BTreeSet<(&str, &str)> = alerts(rules)
        .into_iter()
        .map(|(name, rule)| (name, rule.labels.get("severity").map_or("", String::as_str)))
        .collect();
    let names: BTreeSet<&str> = defined.iter().map(|(name, _)| *name).collect();
    let cases = tests.tests.iter().flat_map(|group| &group.alert_rule_test);
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for case in cases {
        let name = case.alertname.as_str();
        if !names.contains(name) {
            gaps.push(format!(
                "a case at {} expects alert {name}, which {RULES} does not define",
                case.eval_time
            ));
        }
        if case.exp_alerts.is_empty() {
            quiet.insert(name);
        }
        for expected in &case.exp_alerts {
            let severity = expected
                .exp_labels
                .get("severity")
                .map_or("", String::as_str);
            firing.insert((name, severity));
        }
    }
    for (name, severity) in &defined {
        if !firing.contains(&(*name, *severity)) {
            gaps.push(format!(
                "no case expects {name} (severity {severity}) to fire: add one to {TESTS} \
                 with exp_labels and exp_annotations"
            ));
        }
    }
    for name in &names {
        if !quiet.contains(name) {
            gaps.push(format!(
                "no case expects {name} not to fire: add one to {TESTS} with exp_alerts: [] \
                 (the condition false, or true for less than its `for`)"
            ));
        }
    }
    gaps
}

/// What an alert's notification and runbook link need and lack.
fn annotation_gaps(rules: &RuleFile) -> Vec<String> {
    let mut gaps = Vec::new();
    for (name, rule) in alerts(rules) {
        if !name.starts_with("Shardring") {
            gaps.push(format!("alert {name}: its name must start with Shardring"));
        }
        match rule.labels.get("severity") {
            Some(severity) if SEVERITIES.contains(&severity.as_str()) => {}
            other => gaps.push(format!(
                "alert {name}: labels.severity is {other:?}, not one of {SEVERITIES:?}"
            )),
        }
        for key in ["summary", "description", "runbook_url"] {
            if rule
                .annotations
                .get(key)
                .is_none_or(|text| text.trim().is_empty())
            {
                gaps.push(format!(
                    "alert {name}: annotations.{key} is missing or empty"
                ));
            }
        }
        let runbook = format!("{RUNBOOKS}#{}", name.to_lowercase());
        if rule
            .annotations
            .get("runbook_url")
            .is_some_and(|url| *url != runbook)
        {
            gaps.push(format!(
                "alert {name}: runbook_url must be {runbook} (the `### {name}` heading of docs/operations.md)"
            ));
        }
    }
    gaps
}

fn promtool_or_skip() -> Option<PathBuf> {
    find_or_skip("alert rules", "promtool", "PROMTOOL")
}

#[test]
fn promtool_accepts_the_rules() {
    let Some(promtool) = promtool_or_skip() else {
        return;
    };
    let output = promtool::check_rules(&promtool, &path(RULES)).unwrap_or_else(|e| panic!("{e}"));
    assert!(output.contains("SUCCESS"), "{output}");
}

#[test]
fn promtool_unit_tests_pass() {
    let Some(promtool) = promtool_or_skip() else {
        return;
    };
    let output = promtool::test_rules(&promtool, &path(TESTS)).unwrap_or_else(|e| panic!("{e}"));
    assert!(output.contains("SUCCESS"), "{output}");
}

/// The unit tests would catch a rule that fires on the wrong condition:
/// ShardringGroupNotReady turned to fire on Ready groups fails them, and the
/// error names the rule.
#[test]
fn promtool_unit_tests_fail_on_a_broken_rule() {
    let Some(promtool) = promtool_or_skip() else {
        return;
    };
    let rules = read(RULES);
    let condition = "(shardring_group_ready) == 0";
    assert_eq!(
        rules.matches(condition).count(),
        1,
        "ShardringGroupNotReady's condition `{condition}` changed: update this test's mutation"
    );
    let dir = ScratchDir::new("broken-rule");
    std::fs::write(
        dir.0.join("alerts.yaml"),
        rules.replace(condition, "(shardring_group_ready) == 1"),
    )
    .expect("write the broken rules");
    std::fs::write(dir.0.join("alerts_test.yaml"), read(TESTS)).expect("write the tests");
    let error = promtool::test_rules(&promtool, &dir.0.join("alerts_test.yaml"))
        .expect_err("promtool passed the tests with ShardringGroupNotReady firing on Ready groups");
    let message = error.to_string();
    assert!(
        message.contains("ShardringGroupNotReady"),
        "the failure does not name the broken rule:\n{message}"
    );
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_case() {
    let rules: RuleFile = parse(RULES);
    let tests: TestFile = parse(TESTS);
    assert!(
        alerts(&rules).len() >= 10,
        "{RULES} has only {} alerts; is the parser reading the right file?",
        alerts(&rules).len()
    );
    let gaps = coverage_gaps(&rules, &tests);
    assert!(
        gaps.is_empty(),
        "{TESTS} misses cases:\n{}",
        gaps.join("\n")
    );
}

/// The coverage check itself finds each kind of gap.
#[test]
fn coverage_check_finds_untested_alerts() {
    let rules: RuleFile = serde_yaml::from_str(
        "groups:
          - name: g
            rules:
              - alert: ShardringA
                expr: up == 0
                labels: {severity: warning}
              - alert: ShardringA
                expr: up == 0
                labels: {severity: critical}
              - record: job:up:sum
                expr: sum by (job) (up)",
    )
    .expect("rules parse");
    let tests: TestFile = serde_yaml::from_str(
        "
         rule_files: [other.yaml]
         tests:
           - input_series: []
             alert_rule_test:
               - eval_time: 5m
                 alertname: ShardringA
                 exp_alerts:
                   - exp_labels: {severity: warning}
               - eval_time: 6m
                 alertname: ShardringTypo
                 exp_alerts: []",
    )
    .expect("tests parse");
    let gaps = coverage_gaps(&rules, &tests);
    let expected = [
        "does not load alerts.yaml",
        "expects alert ShardringTypo, which",
        "no case expects ShardringA (severity critical) to fire",
        "no case expects ShardringA not to fire",
    ];
    assert_eq!(gaps.len(), expected.len(), "{gaps:#?}");
    for (gap, want) in gaps.iter().zip(expected) {
        assert!(gap.contains(want), "`{gap}` does not say `{want}`");
    }
}

#[test]
fn every_alert_has_a_severity_summary_description_and_runbook() {
    let rules: RuleFile = parse(RULES);
    let gaps = annotation_gaps(&rules);
    assert!(gaps.is_empty(), "{RULES}:\n{}", gaps.join("\n"));
}

#[test]
fn annotation_check_finds_missing_fields() {
    let rules: RuleFile = serde_yaml::from_str(
        "groups:
          - name: g
            rules:
              - alert: ShardringB
                expr: up == 0
                labels: {severity: page}
                annotations:
                  summary: ''
                  runbook_url: https://example.com/b",
    )
    .expect("rules parse");
    let gaps = annotation_gaps(&rules);
    let expected = [
        "labels.severity is Some(\"page\")",
        "annotations.summary is missing",
        "annotations.description is missing",
        "runbook_url must be https://github.com/shardring/shardring/blob/main/docs/operations.md#shardringb",
    ];
    assert_eq!(gaps.len(), expected.len(), "{gaps:#?}");
    for (gap, want) in gaps.iter().zip(expected) {
        assert!(gap.contains(want), "`{gap}` does not say `{want}`");
    }
}

#[test]
fn chart_copy_matches_the_rules() {
    shardring_ops::tools::chart_copy_drift(&path(RULES), &path(CHART_COPY))
        .unwrap_or_else(|drift| panic!("{drift}"));
}

/// A directory of its own under the system's temporary directory, removed
/// when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "shardring-ops-alerts-{name}-{}",
            std::process::id()
        ));
        // A leftover of a killed run with the same pid.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        Self(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
