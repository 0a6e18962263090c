//! The Grafana dashboard: well formed as Grafana reads it (unique panel
//! ids, every query on the dashboard's data source variable, the variables
//! it uses defined), every query accepted by a real Prometheus (Debian's
//! `prometheus`, started on loopback with nothing to scrape: a parse error
//! or an unknown function is refused), and the chart's copy the same file.
//! That every query returns series from a running operator is the e2e
//! test `day2::` on the kit.

use std::collections::BTreeSet;
use std::time::Duration;

use shardring_ops::dashboard;
use shardring_ops::prometheus::Prometheus;
use shardring_ops::tools::find_or_skip;

#[test]
fn the_dashboard_is_well_formed() {
    let board = dashboard::load().unwrap();
    let panels = board["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in panels {
        let id = panel["id"].as_u64().expect("every panel has a numeric id");
        assert!(ids.insert(id), "panel id {id} is used twice");
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "panel {id} has no title");
        assert!(
            panel["description"].as_str().is_some_and(|d| !d.is_empty()),
            "panel {title:?} says nothing about what it shows"
        );
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {title:?} must use the dashboard's data source variable"
        );
        let width =
            panel["gridPos"]["x"].as_u64().unwrap() + panel["gridPos"]["w"].as_u64().unwrap();
        assert!(width <= 24, "panel {title:?} is wider than the dashboard");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title:?} has no query");
    }
    let variables: BTreeSet<&str> = board["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for query in dashboard::queries(&board) {
        assert!(
            !query.expr.is_empty(),
            "{}/{} has no expr",
            query.panel,
            query.ref_id
        );
        for variable in ["namespace", "shardgroup"] {
            if query.expr.contains(&format!("${variable}")) {
                assert!(
                    variables.contains(variable),
                    "${variable} is not a dashboard variable"
                );
            }
        }
    }
}

#[test]
fn every_query_is_accepted_by_a_real_prometheus() {
    let Some(binary) = find_or_skip("dashboard queries", "prometheus", "PROMETHEUS") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("shardring-dashboard-{}", std::process::id()));
    let prometheus = Prometheus::start(&binary, &dir, &[], Duration::from_secs(1)).unwrap();
    let board = dashboard::load().unwrap();
    let queries = dashboard::queries(&board);
    let refused: Vec<String> = queries
        .iter()
        .filter_map(|q| {
            prometheus
                .query(&q.expanded("1m"))
                .err()
                .map(|e| format!("{}/{}: {e}", q.panel, q.ref_id))
        })
        .collect();
    drop(prometheus);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
    println!(
        "dashboard: {} queries accepted by prometheus",
        queries.len()
    );
}

#[test]
fn the_chart_carries_the_same_dashboard() {
    shardring_ops::tools::chart_copy_drift(&dashboard::path(), &dashboard::chart_copy_path())
        .unwrap_or_else(|drift| panic!("{drift}"));
}
