//! Object metadata the server owns: timestamps, uids, generated names, the
//! defaults the real server fills in on create (pods, namespaces), the
//! Established conditions of CRDs, and what counts as a spec change for
//! `metadata.generation`.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use super::resources::ResourceType;

/// A random 64-bit number (std's per-process random hash keys, mixed with a
/// counter so two calls never repeat).
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// A fresh version-4-shaped uid.
pub(crate) fn new_uid() -> String {
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// RFC 3339 time in whole seconds, `offset_secs` from now.
pub(crate) fn timestamp(offset_secs: i64) -> String {
    let now = jiff::Timestamp::now();
    let at = now
        .checked_add(jiff::SignedDuration::from_secs(offset_secs))
        .unwrap_or(now);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `metadata` of `obj` as a map, created when missing.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made a map")
}

/// A string field of `metadata`.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj["metadata"][field].as_str()
}

/// Whether `a` and `b` are equal apart from `metadata.resourceVersion`.
pub(crate) fn same_content(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let skip = |k: &str| k == "resourceVersion";
    let meta_eq = |x: &Value, y: &Value| {
        let (Some(x), Some(y)) = (x.as_object(), y.as_object()) else {
            return x == y;
        };
        x.iter().filter(|(k, _)| !skip(k)).count() == y.iter().filter(|(k, _)| !skip(k)).count()
            && x.iter()
                .filter(|(k, _)| !skip(k))
                .all(|(k, v)| y.get(k) == Some(v))
    };
    a.len() == b.len()
        && a.iter().all(|(k, v)| match (k.as_str(), b.get(k)) {
            ("metadata", Some(other)) => meta_eq(v, other),
            (_, other) => other == Some(v),
        })
}

/// Whether anything outside `metadata` and `status` differs (bumps
/// `metadata.generation`).
pub(crate) fn spec_changed(old: &Value, new: &Value) -> bool {
    let empty = Map::new();
    let (a, b) = (
        old.as_object().unwrap_or(&empty),
        new.as_object().unwrap_or(&empty),
    );
    let relevant =
        |k: &String| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind");
    a.iter()
        .filter(|(k, _)| relevant(k))
        .any(|(k, v)| b.get(k) != Some(v))
        || b.keys().filter(|k| relevant(k)).any(|k| !a.contains_key(k))
}

/// Fills in what the real server defaults on create.
pub(crate) fn apply_create_defaults(rt: &ResourceType, obj: &mut Value) {
    if rt.is_pod() {
        let spec = &mut obj["spec"];
        if spec.is_object() {
            let map = spec.as_object_mut().expect("checked");
            for (k, v) in [
                ("restartPolicy", json!("Always")),
                ("terminationGracePeriodSeconds", json!(30)),
                ("dnsPolicy", json!("ClusterFirst")),
                ("schedulerName", json!("default-scheduler")),
                ("securityContext", json!({})),
                ("enableServiceLinks", json!(true)),
                ("preemptionPolicy", json!("PreemptLowerPriority")),
                ("priority", json!(0)),
            ] {
                map.entry(k).or_insert(v);
            }
            if let Some(containers) = map.get_mut("containers").and_then(Value::as_array_mut) {
                for c in containers.iter_mut().filter_map(Value::as_object_mut) {
                    c.entry("terminationMessagePath")
                        .or_insert(json!("/dev/termination-log"));
                    c.entry("terminationMessagePolicy").or_insert(json!("File"));
                    c.entry("imagePullPolicy").or_insert(json!("IfNotPresent"));
                    c.entry("resources").or_insert(json!({}));
                }
            }
        }
    }
    if rt.is_namespace() {
        let name = meta_str(obj, "name").unwrap_or_default().to_owned();
        let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".to_owned(), json!(name));
        }
        obj["spec"] = json!({ "finalizers": ["kubernetes"] });
        obj["status"] = json!({ "phase": "Active" });
    }
}

/// The status the real server gives a created object whose kind has a
/// status subresource (the request's status is ignored).
pub(crate) fn initial_status(rt: &ResourceType) -> Option<Value> {
    if rt.is_pod() {
        Some(json!({ "phase": "Pending", "qosClass": "BestEffort" }))
    } else if rt.is_namespace() {
        Some(json!({ "phase": "Active" }))
    } else {
        None
    }
}

/// Sets the conditions the apiextensions controllers set on a CRD once its
/// names are accepted and it is served.
pub(crate) fn establish_crd(obj: &mut Value) {
    let names = obj["spec"]["names"].clone();
    let now = timestamp(0);
    let condition = |t: &str, reason: &str, message: &str| {
        json!({
            "type": t,
            "status": "True",
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        })
    };
    let versions: Vec<Value> = obj["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    obj["status"] = json!({
        "acceptedNames": names,
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": versions,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_unique_and_shaped() {
        let (a, b) = (new_uid(), new_uid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.split('-').count(), 5);
    }

    #[test]
    fn content_comparison_ignores_the_version() {
        let a = json!({"metadata":{"name":"a","resourceVersion":"1"},"data":{"k":"v"}});
        let b = json!({"metadata":{"name":"a","resourceVersion":"2"},"data":{"k":"v"}});
        assert!(same_content(&a, &b));
        let c = json!({"metadata":{"name":"a"},"data":{"k":"w"}});
        assert!(!same_content(&a, &c));
    }

    #[test]
    fn spec_change_ignores_metadata_and_status() {
        let old = json!({"metadata":{"a":1},"spec":{"x":1},"status":{"s":1}});
        let meta_only = json!({"metadata":{"a":2},"spec":{"x":1},"status":{"s":2}});
        let spec = json!({"metadata":{"a":1},"spec":{"x":2}});
        assert!(!spec_changed(&old, &meta_only));
        assert!(spec_changed(&old, &spec));
    }
}
