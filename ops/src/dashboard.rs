//! The Grafana dashboard (`config/monitoring/dashboard.json`): its panels'
//! queries, and those queries as Prometheus runs them once Grafana has
//! filled in the dashboard's variables (every namespace and group, a
//! rate interval), so a test can ask a real Prometheus each of them.

use std::path::PathBuf;

use serde_json::Value;

use crate::tools::workspace_root;

/// Where the dashboard is kept.
pub fn path() -> PathBuf {
    workspace_root().join("config/monitoring/dashboard.json")
}

/// The chart's copy (`scripts/generate.sh` writes it).
pub fn chart_copy_path() -> PathBuf {
    workspace_root().join("deploy/helm/shardring/files/dashboard.json")
}

/// One query of one panel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanelQuery {
    /// The panel's title.
    pub panel: String,
    /// The target's `refId`.
    pub ref_id: String,
    /// The PromQL, as the dashboard has it (with variables).
    pub expr: String,
}

impl PanelQuery {
    /// The query with the dashboard's variables as Grafana fills them in
    /// for "All" (`.*`) and `rate_interval` for `$__rate_interval`.
    pub fn expanded(&self, rate_interval: &str) -> String {
        self.expr
            .replace("$__rate_interval", rate_interval)
            .replace("$namespace", ".*")
            .replace("$shardgroup", ".*")
    }
}

/// Reads and parses the dashboard.
///
/// # Errors
/// When the file cannot be read or is not JSON.
pub fn load() -> Result<Value, String> {
    let path = path();
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

/// Every query of every panel (rows hold none), in the dashboard's order.
pub fn queries(dashboard: &Value) -> Vec<PanelQuery> {
    let panels = dashboard["panels"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    panels
        .iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().unwrap_or_default().to_owned();
            let targets = panel["targets"].as_array().map_or(&[][..], Vec::as_slice);
            targets.iter().map(move |target| PanelQuery {
                panel: title.clone(),
                ref_id: target["refId"].as_str().unwrap_or_default().to_owned(),
                expr: target["expr"].as_str().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_filled_in_as_grafana_does_for_all() {
        let query = PanelQuery {
            panel: "p".into(),
            ref_id: "A".into(),
            expr:
                r#"rate(x{namespace=~"$namespace", shardgroup=~"$shardgroup"}[$__rate_interval])"#
                    .into(),
        };
        assert_eq!(
            query.expanded("1m"),
            r#"rate(x{namespace=~".*", shardgroup=~".*"}[1m])"#
        );
    }
}
