//! The chart's optional monitoring objects, rendered by a real helm: with
//! `metrics.prometheusRule.enabled` a PrometheusRule whose groups are
//! `config/monitoring/alerts.yaml` (Prometheus' `{{ $labels.x }}`
//! templates come through Helm untouched), with `metrics.dashboard.enabled`
//! a ConfigMap for the Grafana sidecar holding
//! `config/monitoring/dashboard.json`, and neither by default.

use serde_yaml::Value;

use super::helm_render::run_helm;
use super::{read, root, yaml};

/// The rendered objects of kind `kind`.
fn rendered(kind: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template", "x", "deploy/helm/shardring"];
    all.extend_from_slice(args);
    let text = run_helm(&all);
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|doc| Value::deserialize(doc).ok())
        .filter(|doc| doc["kind"] == kind)
        .collect()
}

use serde::Deserialize as _;

#[test]
fn by_default_the_chart_renders_no_rule_and_no_dashboard() {
    assert!(rendered("PrometheusRule", &[]).is_empty());
    let dashboards: Vec<Value> = rendered("ConfigMap", &[])
        .into_iter()
        .filter(|cm| cm["metadata"]["labels"]["grafana_dashboard"].is_string())
        .collect();
    assert!(dashboards.is_empty(), "{dashboards:?}");
}

#[test]
fn the_prometheus_rule_holds_the_alert_rules_as_they_are() {
    let rules = rendered(
        "PrometheusRule",
        &[
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.prometheusRule.labels.release=prometheus",
        ],
    );
    assert_eq!(rules.len(), 1, "{rules:?}");
    let rule = &rules[0];
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let plain = yaml(
        &read(&root().join("config/monitoring/alerts.yaml")),
        "alerts.yaml",
    );
    assert_eq!(rule["spec"]["groups"], plain["groups"]);
    let text = serde_yaml::to_string(&rule["spec"]).unwrap();
    assert!(text.contains("{{ $labels.namespace }}"), "{text}");
}

#[test]
fn the_dashboard_config_map_holds_the_dashboard_for_the_grafana_sidecar() {
    let maps: Vec<Value> = rendered(
        "ConfigMap",
        &[
            "--set",
            "metrics.dashboard.enabled=true",
            "--set",
            "metrics.dashboard.namespace=monitoring",
        ],
    )
    .into_iter()
    .filter(|cm| cm["metadata"]["labels"]["grafana_dashboard"] == "1")
    .collect();
    assert_eq!(maps.len(), 1, "{maps:?}");
    assert_eq!(maps[0]["metadata"]["namespace"], "monitoring");
    let json = maps[0]["data"]["shardring.json"]
        .as_str()
        .expect("shardring.json");
    let rendered: serde_json::Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let source: serde_json::Value =
        serde_json::from_str(&read(&root().join("config/monitoring/dashboard.json"))).unwrap();
    assert_eq!(rendered, source);
}
