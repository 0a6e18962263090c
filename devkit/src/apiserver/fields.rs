//! Field ownership, as server-side apply tracks it: per object, one entry per
//! (field manager, operation, subresource) with the set of leaf field paths
//! it owns, rendered into `metadata.managedFields` (FieldsV1) on every write.
//! Lists are atomic leaves; maps are walked key by key. Built for objects
//! with tens of thousands of fields: diffs skip equal subtrees, field sets
//! are shared until changed, and each entry's FieldsV1 is rendered again
//! only when its set changes.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};

/// A leaf field path: its keys joined by [`SEP`], e.g.
/// `metadata␁labels␁app`.
pub(crate) type Path = String;

/// Separates the keys of a [`Path`].
pub(crate) const SEP: char = '\u{1}';

/// How an entry's fields were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// Server-side apply.
    Apply,
    /// Create, replace or a non-apply patch.
    Update,
}

/// One `managedFields` entry.
#[derive(Debug, Clone)]
pub(crate) struct ManagerEntry {
    pub manager: String,
    pub operation: Operation,
    /// `Some("status")` for writes to the status subresource.
    pub subresource: Option<String>,
    pub api_version: String,
    pub time: String,
    fields: Arc<BTreeSet<Path>>,
    /// FieldsV1 of `fields`, while they have not changed.
    rendered: Option<Arc<Value>>,
}

impl ManagerEntry {
    fn is(&self, manager: &str, operation: Operation, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    fn remove_all<'a>(&mut self, paths: impl IntoIterator<Item = &'a Path> + Clone) {
        if paths.clone().into_iter().any(|p| self.fields.contains(p)) {
            let fields = Arc::make_mut(&mut self.fields);
            for p in paths {
                fields.remove(p);
            }
            self.rendered = None;
        }
    }
}

/// Who the writer is, for ownership bookkeeping.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Writer<'a> {
    pub manager: &'a str,
    pub subresource: Option<&'a str>,
    pub api_version: &'a str,
    pub now: &'a str,
}

/// Every entry of one object.
#[derive(Debug, Clone, Default)]
pub(crate) struct Managed {
    entries: Vec<ManagerEntry>,
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

struct Diff {
    changed: Vec<Path>,
    removed: Vec<Path>,
}

impl Diff {
    fn walk(
        &mut self,
        old: Option<&Value>,
        new: Option<&Value>,
        prefix: &mut String,
        depth: usize,
        in_meta: bool,
    ) {
        let (old, new) = (old.filter(|v| !v.is_null()), new.filter(|v| !v.is_null()));
        if old == new {
            return;
        }
        let old_node = old.is_some_and(|v| is_node(v, depth));
        let new_node = new.is_some_and(|v| is_node(v, depth));
        if old_node && new_node {
            let (a, b) = (
                old.and_then(Value::as_object),
                new.and_then(Value::as_object),
            );
            let (a, b) = (a.expect("node"), b.expect("node"));
            let keys = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
            for k in keys.filter(|k| tracked(depth, in_meta, k)) {
                let len = push_key(prefix, k);
                self.walk(
                    a.get(k),
                    b.get(k),
                    prefix,
                    depth + 1,
                    depth == 0 && k == "metadata",
                );
                prefix.truncate(len);
            }
            return;
        }
        if let Some(o) = old {
            if old_node {
                collect(o, prefix, depth, in_meta, &mut self.removed);
            } else if new.is_none() || new_node {
                self.removed.push(prefix.clone());
            }
        }
        if let Some(n) = new {
            collect(n, prefix, depth, in_meta, &mut self.changed);
        }
    }
}

/// Leaves set or changed, and leaves removed, going from `old` to `new`.
pub(crate) fn diff(old: &Value, new: &Value) -> (Vec<Path>, Vec<Path>) {
    let mut d = Diff {
        changed: Vec::new(),
        removed: Vec::new(),
    };
    d.walk(Some(old), Some(new), &mut String::new(), 0, false);
    (d.changed, d.removed)
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

fn render_path(path: &str) -> String {
    path.split(SEP).fold(String::new(), |mut s, k| {
        s.push('.');
        s.push_str(k);
        s
    })
}

fn fields_v1(fields: &BTreeSet<Path>) -> Value {
    let mut tree = Map::new();
    for path in fields {
        let mut node = &mut tree;
        for k in path.split(SEP) {
            node = node
                .entry(format!("f:{k}"))
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("fieldsV1 nodes are maps");
        }
    }
    Value::Object(tree)
}

impl Managed {
    fn entry_index(&mut self, w: Writer<'_>, operation: Operation) -> usize {
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.is(w.manager, operation, w.subresource))
        {
            self.entries[i].api_version = w.api_version.to_owned();
            return i;
        }
        self.entries.push(ManagerEntry {
            manager: w.manager.to_owned(),
            operation,
            subresource: w.subresource.map(str::to_owned),
            api_version: w.api_version.to_owned(),
            time: w.now.to_owned(),
            fields: Arc::default(),
            rendered: None,
        });
        self.entries.len() - 1
    }

    /// Bookkeeping of a create, replace or non-apply patch: the writer owns
    /// what it changed, which nobody else owns any more.
    pub fn record_update(&mut self, w: Writer<'_>, changed: &[Path], removed: &[Path]) {
        for entry in &mut self.entries {
            entry.remove_all(changed.iter().chain(removed));
        }
        if !changed.is_empty() {
            let idx = self.entry_index(w, Operation::Update);
            let entry = &mut self.entries[idx];
            Arc::make_mut(&mut entry.fields).extend(changed.iter().cloned());
            entry.rendered = None;
            entry.time = w.now.to_owned();
        }
        self.entries.retain(|e| !e.fields.is_empty());
    }

    /// Conflicts of an apply: fields whose value it changes that another
    /// entry owns, as the real server's message lists them.
    pub fn conflicts(&self, w: Writer<'_>, changed: &[Path]) -> Vec<String> {
        let mut out = Vec::new();
        for entry in &self.entries {
            if entry.is(w.manager, Operation::Apply, w.subresource) {
                continue;
            }
            for p in changed.iter().filter(|p| entry.fields.contains(*p)) {
                out.push(format!(
                    "conflict with \"{}\" using {}: {}",
                    entry.manager,
                    entry.api_version,
                    render_path(p)
                ));
            }
        }
        out
    }

    /// Bookkeeping of an apply that sent `applied` and changed `changed`
    /// (forced: other entries lose those fields). Returns the fields the
    /// manager applied before, no longer sends, and nobody else owns: the
    /// apply removes them from the object.
    pub fn record_apply(
        &mut self,
        w: Writer<'_>,
        applied: BTreeSet<Path>,
        changed: &[Path],
    ) -> Vec<Path> {
        let idx = self.entry_index(w, Operation::Apply);
        for (i, entry) in self.entries.iter_mut().enumerate() {
            if i != idx {
                entry.remove_all(changed);
            }
        }
        let entry = &mut self.entries[idx];
        let before = if *entry.fields == applied {
            Arc::clone(&entry.fields)
        } else {
            entry.rendered = None;
            std::mem::replace(&mut entry.fields, Arc::new(applied))
        };
        let mut dropped: Vec<Path> = Vec::new();
        for p in before.difference(&self.entries[idx].fields) {
            if !self.entries.iter().any(|e| e.fields.contains(p)) {
                dropped.push(p.clone());
            }
        }
        if !changed.is_empty() || !dropped.is_empty() {
            self.entries[idx].time = w.now.to_owned();
        }
        dropped
    }

    /// Drops `removed` fields from every entry, then empty entries.
    pub fn forget(&mut self, removed: &[Path]) {
        for entry in &mut self.entries {
            entry.remove_all(removed);
        }
        self.entries.retain(|e| !e.fields.is_empty());
    }

    /// Whether both hold the same entries (rendered caches aside).
    pub fn same_as(&self, other: &Managed) -> bool {
        self.entries.len() == other.entries.len()
            && self.entries.iter().zip(&other.entries).all(|(a, b)| {
                a.manager == b.manager
                    && a.operation == b.operation
                    && a.subresource == b.subresource
                    && a.api_version == b.api_version
                    && a.time == b.time
                    && (Arc::ptr_eq(&a.fields, &b.fields) || a.fields == b.fields)
            })
    }

    /// `metadata.managedFields`.
    pub fn render(&mut self) -> Value {
        Value::Array(
            self.entries
                .iter_mut()
                .map(|e| {
                    let fields = e
                        .rendered
                        .get_or_insert_with(|| Arc::new(fields_v1(&e.fields)));
                    let mut entry = json!({
                        "manager": e.manager,
                        "operation": match e.operation {
                            Operation::Apply => "Apply",
                            Operation::Update => "Update",
                        },
                        "apiVersion": e.api_version,
                        "time": e.time,
                        "fieldsType": "FieldsV1",
                        "fieldsV1": (**fields).clone(),
                    });
                    if let Some(sub) = &e.subresource {
                        entry["subresource"] = json!(sub);
                    }
                    entry
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn diff_reports_changed_and_removed_leaves() {
        let old = json!({"metadata":{"labels":{"a":"1","b":"2"}},"data":{"k":"v","m":{"x":1}}});
        let new = json!({"metadata":{"labels":{"a":"1","c":"3"}},"data":{"k":"w","m":5}});
        let (changed, removed) = diff(&old, &new);
        assert_eq!(
            changed,
            vec![p("data.k"), p("data.m"), p("metadata.labels.c")]
        );
        assert_eq!(removed, vec![p("data.m.x"), p("metadata.labels.b")]);
        assert_eq!(diff(&old, &old), (vec![], vec![]));
    }

    #[test]
    fn remove_prunes_empty_maps() {
        let mut obj = json!({"metadata":{"annotations":{"a":"1"},"name":"n"}});
        remove_at(&mut obj, &p("metadata.annotations.a"));
        assert_eq!(obj, json!({"metadata":{"name":"n"}}));
    }

    #[test]
    fn apply_drops_only_unshared_fields() {
        let w = Writer {
            manager: "m",
            subresource: None,
            api_version: "v1",
            now: "t",
        };
        let mut m = Managed::default();
        m.record_apply(w, [p("data.a"), p("data.b")].into(), &[]);
        let other = Writer { manager: "o", ..w };
        m.record_apply(other, [p("data.b")].into(), &[]);
        let dropped = m.record_apply(w, BTreeSet::new(), &[]);
        assert_eq!(dropped, vec![p("data.a")]);
        let rendered = m.render();
        assert_eq!(rendered[1]["fieldsV1"], json!({"f:data": {"f:b": {}}}));
    }
}
