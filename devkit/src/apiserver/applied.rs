//! What server-side apply needs beyond a merge patch: per object, each field
//! manager's last applied set of leaf field paths (main resource and status
//! subresource apart), so that a field a manager stops applying is removed
//! unless another applier still sends it. Lists are atomic leaves; maps are
//! walked key by key.
//!
//! Not emulated: conflicts between managers and `metadata.managedFields`.
//! Every writer in this workspace applies with force and none reads
//! managedFields; both are checked on the real control plane instead
//! (`e2e/tests/it/api_semantics.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

/// A leaf field path: its keys joined by [`SEP`], e.g.
/// `metadata␁labels␁app`.
pub(crate) type Path = String;

/// Separates the keys of a [`Path`].
const SEP: char = '\u{1}';

/// The fields each manager applied last to one object.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Applied {
    /// (manager, to the status subresource, its applied leaf paths).
    sets: Vec<(String, bool, Arc<BTreeSet<Path>>)>,
}

impl Applied {
    /// Records that `manager` applied `paths` (to `/status` when `status`).
    /// Returns the paths it applied before, no longer sends, and no other
    /// applier sends: the apply removes them from the object.
    pub fn record(&mut self, manager: &str, status: bool, paths: BTreeSet<Path>) -> Vec<Path> {
        let paths = Arc::new(paths);
        let before = match self
            .sets
            .iter_mut()
            .find(|(m, s, _)| m == manager && *s == status)
        {
            Some((_, _, set)) => std::mem::replace(set, paths.clone()),
            None => {
                self.sets.push((manager.to_owned(), status, paths.clone()));
                Arc::default()
            }
        };
        before
            .difference(&paths)
            .filter(|p| !self.sets.iter().any(|(_, _, set)| set.contains(*p)))
            .cloned()
            .collect()
    }
}

/// Whether the child `key` of a node at `depth` (under `metadata` when
/// `in_metadata`) is a field ownership tracks.
fn tracked(depth: usize, in_metadata: bool, key: &str) -> bool {
    match (depth, in_metadata) {
        (0, _) => !matches!(key, "apiVersion" | "kind"),
        (1, true) => matches!(
            key,
            "labels" | "annotations" | "ownerReferences" | "finalizers"
        ),
        _ => true,
    }
}

/// Whether `value` at `depth` is walked into (a non-empty map, or the root).
fn is_node(value: &Value, depth: usize) -> bool {
    value
        .as_object()
        .is_some_and(|m| depth == 0 || !m.is_empty())
}

fn push_key(prefix: &mut String, key: &str) -> usize {
    let len = prefix.len();
    if !prefix.is_empty() {
        prefix.push(SEP);
    }
    prefix.push_str(key);
    len
}

fn collect(value: &Value, prefix: &mut String, depth: usize, in_meta: bool, out: &mut Vec<Path>) {
    if !is_node(value, depth) {
        // An empty `metadata` owns nothing (its fields are system fields).
        if !(depth == 1 && prefix == "metadata") {
            out.push(prefix.clone());
        }
        return;
    }
    for (k, v) in value.as_object().into_iter().flatten() {
        if v.is_null() || !tracked(depth, in_meta, k) {
            continue;
        }
        let len = push_key(prefix, k);
        collect(v, prefix, depth + 1, depth == 0 && k == "metadata", out);
        prefix.truncate(len);
    }
}

/// The tracked leaf paths of `value` (an object).
pub(crate) fn leaf_paths(value: &Value) -> BTreeSet<Path> {
    let mut out = Vec::new();
    collect(value, &mut String::new(), 0, false, &mut out);
    out.into_iter().collect()
}

/// Removes the field at `path`, then every map on the way up left empty.
pub(crate) fn remove_at(value: &mut Value, path: &str) {
    fn go(value: &mut Value, keys: &[&str]) -> bool {
        let Some(map) = value.as_object_mut() else {
            return false;
        };
        match keys {
            [] => false,
            [last] => map.remove(*last).is_some() && map.is_empty(),
            [first, rest @ ..] => {
                let emptied = map.get_mut(*first).is_some_and(|child| go(child, rest));
                if emptied {
                    map.remove(*first);
                }
                emptied && map.is_empty()
            }
        }
    }
    let keys: Vec<&str> = path.split(SEP).collect();
    go(value, &keys);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Path {
        s.replace('.', &SEP.to_string())
    }

    #[test]
    fn leaves_skip_system_metadata() {
        let obj = json!({"apiVersion":"v1","kind":"ConfigMap",
            "metadata":{"name":"a","labels":{"x":"1"},"resourceVersion":"3"},
            "data":{"k":"v","e":{}}});
        let keys: Vec<Path> = leaf_paths(&obj).into_iter().collect();
        assert_eq!(keys, vec![p("data.e"), p("data.k"), p("metadata.labels.x")]);
        let status_only = json!({"metadata":{},"status":{"ready":true}});
        let keys: Vec<Path> = leaf_paths(&status_only).into_iter().collect();
        assert_eq!(keys, vec![p("status.ready")]);
    }

    #[test]
    fn remove_prunes_empty_maps() {
        let mut obj = json!({"metadata":{"annotations":{"a":"1"},"name":"n"}});
        remove_at(&mut obj, &p("metadata.annotations.a"));
        assert_eq!(obj, json!({"metadata":{"name":"n"}}));
    }

    #[test]
    fn apply_drops_only_unshared_fields() {
        let mut applied = Applied::default();
        applied.record("m", false, [p("data.a"), p("data.b")].into());
        applied.record("o", false, [p("data.b")].into());
        // The status subresource's sets are apart from the main resource's.
        assert!(applied.record("m", true, [p("status.x")].into()).is_empty());
        assert_eq!(
            applied.record("m", false, BTreeSet::new()),
            vec![p("data.a")]
        );
        assert_eq!(
            applied.record("m", true, BTreeSet::new()),
            vec![p("status.x")]
        );
    }
}
