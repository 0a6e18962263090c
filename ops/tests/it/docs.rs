//! The operations guide (`docs/operations.md`) against the artifacts: every
//! alert has its runbook heading (the target of its `runbook_url`, whose
//! form `alerts::` checks), and every metric an alert or a dashboard panel
//! reads is in the guide's metrics tables. That a running operator exports
//! no metric the guide does not document is checked by the e2e test
//! `day2::` on the kit.

use shardring_ops::{dashboard, docs};

fn alert_rules() -> serde_yaml::Value {
    let path = shardring_ops::tools::workspace_root().join("config/monitoring/alerts.yaml");
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn every_alert_has_its_runbook_in_the_guide() {
    let guide = docs::read().unwrap();
    let runbooks = docs::runbooks(&guide);
    let rules = alert_rules();
    let mut alerts = 0;
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            assert!(
                runbooks.contains(alert),
                "docs/operations.md has no `### {alert}` under `## Alerts` (its runbook_url points there)"
            );
        }
    }
    assert!(alerts > 0);
}

#[test]
fn every_metric_the_alerts_and_the_dashboard_read_is_documented() {
    let guide = docs::read().unwrap();
    let documented = docs::documented_metrics(&guide);
    let rules = serde_yaml::to_string(&alert_rules()).unwrap();
    let board = dashboard::load().unwrap();
    let queries: String = dashboard::queries(&board)
        .into_iter()
        .map(|q| q.expr + "\n")
        .collect();
    for (what, text) in [
        ("config/monitoring/alerts.yaml", rules),
        ("config/monitoring/dashboard.json", queries),
    ] {
        let undocumented: Vec<String> = docs::metric_names(&text)
            .into_iter()
            .filter(|name| !documented.contains(name))
            .collect();
        assert!(
            undocumented.is_empty(),
            "{what} reads metrics docs/operations.md does not document: {undocumented:?}"
        );
    }
}
