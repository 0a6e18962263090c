//! Discovery answers: `/version`, `/api`, `/apis` and the resource lists of
//! each group version, derived from the registry.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::resources::Registry;

/// `GET /version`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "35",
        "gitVersion": "v1.35.0-shardring-mock",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub(crate) fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1" }],
    })
}

/// `GET /apis`.
pub(crate) fn groups(registry: &Registry) -> Value {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rt in registry.all().iter().filter(|t| !t.group.is_empty()) {
        let versions = groups.entry(rt.group.clone()).or_default();
        if !versions.contains(&rt.version) {
            versions.push(rt.version.clone());
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| json!({ "groupVersion": format!("{name}/{v}"), "version": v }))
                .collect();
            json!({ "name": name, "versions": vs, "preferredVersion": vs[0] })
        })
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `GET /api/v1` or `GET /apis/{group}/{version}`; `None` when nothing is
/// served there.
pub(crate) fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut list = Vec::new();
    for rt in registry
        .all()
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        let verbs = if rt.is_token_review() {
            json!(["create"])
        } else {
            json!([
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch"
            ])
        };
        list.push(json!({
            "name": rt.plural,
            "singularName": rt.kind.to_lowercase(),
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": verbs,
        }));
        if rt.status_subresource {
            list.push(json!({
                "name": format!("{}/status", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    (!list.is_empty()).then(|| {
        json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": list,
        })
    })
}
