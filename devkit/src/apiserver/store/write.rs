//! Replace and patch (merge, JSON patch, server-side apply) with the real
//! server's rules: system metadata it owns, resourceVersion and uid
//! preconditions, status subresource isolation, generation bumps, removal
//! of fields an applier stops sending, no-op writes that change nothing, and removal of an object
//! whose last finalizer goes while it is being deleted. An apply to an
//! absent object is a create ([`super::create`]).

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::applied::{self, Applied};
use super::super::meta::{self, meta_mut, meta_str};
use super::super::resources::ResourceType;
use super::super::status::ApiError;
use super::create::{SYSTEM_META, check_names, create_locked};
use super::{Change, State, Store, Written, obj_key};

/// A write to an existing object.
#[derive(Debug, Clone)]
pub(crate) enum UpdateOp {
    /// PUT: the whole object.
    Replace(Value),
    /// RFC 7386 merge patch (also used for strategic merge patches).
    Merge(Value),
    /// RFC 6902 JSON patch.
    Json(json_patch::Patch),
    /// Server-side apply of a (partial) object (always as if forced:
    /// conflicts are not emulated).
    Apply { body: Value },
}

fn rv_precondition(
    rt: &ResourceType,
    name: &str,
    body: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    match meta_str(body, "resourceVersion").filter(|v| !v.is_empty()) {
        Some(v) if Some(v) != meta_str(old, "resourceVersion") => Err(ApiError::conflict(rt, name)),
        _ => Ok(()),
    }
}

fn uid_precondition(
    rt: &ResourceType,
    name: &str,
    new: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    match (meta_str(new, "uid"), meta_str(old, "uid")) {
        (Some(want), Some(have)) if !want.is_empty() && want != have => {
            Err(ApiError::conflict_with(
                rt,
                name,
                format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {have}"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// `body` restricted to what a write to the main resource (`status` false)
/// or to `/status` may change, for kinds with a status subresource.
fn scope(rt: &ResourceType, status: bool, new: Value, old: &Value) -> Value {
    if !rt.status_subresource {
        return new;
    }
    if status {
        let mut out = old.clone();
        match new.get("status") {
            Some(s) if !s.is_null() => out["status"] = s.clone(),
            _ => {
                out.as_object_mut().map(|m| m.remove("status"));
            }
        }
        // Ownership-relevant metadata the status write cannot change, but the
        // preconditions it carries still apply.
        for k in ["uid", "resourceVersion"] {
            match new["metadata"].get(k) {
                Some(v) => meta_mut(&mut out).insert(k.to_owned(), v.clone()),
                None => meta_mut(&mut out).remove(k),
            };
        }
        out
    } else {
        let mut out = new;
        match old.get("status") {
            Some(s) => out["status"] = s.clone(),
            None => {
                out.as_object_mut().map(|m| m.remove("status"));
            }
        }
        out
    }
}

impl Store {
    /// Writes to an existing object (or creates it, for an apply of the main
    /// resource).
    pub fn update(
        &self,
        rt: &Arc<ResourceType>,
        ns: Option<&str>,
        name: &str,
        status: bool,
        op: UpdateOp,
        manager: &str,
    ) -> Result<Written, ApiError> {
        let mut state = self.lock();
        let key = obj_key(rt, ns, name);
        let Some(entry) = state.entry(rt, &key) else {
            if let UpdateOp::Apply { body, .. } = op
                && !status
            {
                check_names(rt, &body, ns, name)?;
                let mut body = body;
                meta_mut(&mut body).insert("name".into(), json!(name));
                return create_locked(&mut state, rt, ns, body, manager, false, true);
            }
            return Err(ApiError::not_found(rt, name));
        };
        let old = entry.obj.clone();
        let before = entry.applied.clone();
        let mut applied = before.clone();
        let candidate = match op {
            UpdateOp::Replace(body) => {
                if !body.is_object() {
                    return Err(ApiError::bad_request("the body must be an object"));
                }
                check_names(rt, &body, ns, name)?;
                rv_precondition(rt, name, &body, &old)?;
                if rt.custom && meta_str(&body, "resourceVersion").is_none_or(str::is_empty) {
                    return Err(ApiError::invalid(
                        rt,
                        name,
                        "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                    ));
                }
                body
            }
            UpdateOp::Merge(patch) => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be an object"));
                }
                rv_precondition(rt, name, &patch, &old)?;
                let mut new = (*old).clone();
                json_patch::merge(&mut new, &patch);
                new
            }
            UpdateOp::Json(ops) => {
                let mut new = (*old).clone();
                let ops = null_tests_pass_on_missing_paths(ops, &new);
                json_patch::patch(&mut new, &ops)
                    .map_err(|e| ApiError::invalid(rt, name, &e.to_string()))?;
                new
            }
            UpdateOp::Apply { body } => {
                if !body.is_object() {
                    return Err(ApiError::bad_request("an apply patch must be an object"));
                }
                check_names(rt, &body, ns, name)?;
                rv_precondition(rt, name, &body, &old)?;
                let mut config = scope(rt, status, body, &Value::Object(Default::default()));
                if let Some(m) = config["metadata"].as_object_mut() {
                    for k in SYSTEM_META.iter().filter(|k| **k != "uid") {
                        m.remove(*k);
                    }
                }
                let paths = applied::leaf_paths(&config);
                let mut merged = (*old).clone();
                json_patch::merge(&mut merged, &config);
                for p in applied.record(manager, status, paths) {
                    applied::remove_at(&mut merged, &p);
                }
                merged
            }
        };
        let mut new = scope(rt, status, candidate, &old);
        uid_precondition(rt, name, &new, &old)?;
        finish_metadata(rt, &mut new, &old)?;
        if meta::spec_changed(&old, &new) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            new["metadata"]["generation"] = json!(generation);
        }
        if meta::same_content(&new, &old) && applied == before {
            let entry = state.entry(rt, &key).expect("checked above");
            return Ok(Written {
                obj: entry.obj.clone(),
                bytes: entry.bytes.clone(),
                created: false,
            });
        }
        if rt.is_crd() {
            self.registry.register_crd(&new);
        }
        Ok(finish_write(&mut state, rt, key, new, applied))
    }
}

/// Restores what only the server sets from `old`, and refuses new finalizers
/// on an object being deleted.
fn finish_metadata(rt: &ResourceType, new: &mut Value, old: &Value) -> Result<(), ApiError> {
    new["apiVersion"] = json!(rt.api_version());
    new["kind"] = json!(rt.kind);
    let name = meta_str(old, "name").unwrap_or_default().to_owned();
    let empty = serde_json::Map::new();
    let old_meta = old["metadata"].as_object().unwrap_or(&empty);
    let m = meta_mut(new);
    for k in SYSTEM_META
        .iter()
        .chain(&["name", "namespace", "generateName"])
    {
        match old_meta.get(*k) {
            // managedFields are not emulated (see `applied`).
            Some(v) if *k != "managedFields" => m.insert((*k).to_owned(), v.clone()),
            _ => m.remove(*k),
        };
    }
    if old_meta.contains_key("deletionTimestamp") {
        let before = &old_meta.get("finalizers");
        let added = m
            .get("finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|f| {
                !before
                    .and_then(Value::as_array)
                    .is_some_and(|b| b.contains(f))
            });
        if added {
            return Err(ApiError::invalid(
                rt,
                &name,
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
            ));
        }
    }
    Ok(())
}

/// Whether an object being deleted has nothing left holding it: no
/// finalizers and no grace period (a pod waits for its kubelet).
pub(crate) fn ready_to_remove(obj: &Value) -> bool {
    let m = &obj["metadata"];
    m.get("deletionTimestamp").is_some_and(|t| !t.is_null())
        && m["finalizers"].as_array().is_none_or(Vec::is_empty)
        && m["deletionGracePeriodSeconds"].as_i64().unwrap_or(0) <= 0
        // A namespace's own finalizer ("kubernetes") holds it until empty.
        && obj["spec"]["finalizers"].as_array().is_none_or(Vec::is_empty)
}

/// Commits `new`, removing it instead when its deletion is complete.
pub(crate) fn finish_write(
    state: &mut State,
    rt: &Arc<ResourceType>,
    key: super::ObjKey,
    new: Value,
    applied: Applied,
) -> Written {
    if ready_to_remove(&new) {
        let ns = key.0.clone();
        let (obj, bytes) = state.commit(rt, key, Change::Remove(new));
        state.after_removal(&ns);
        return Written {
            obj,
            bytes,
            created: false,
        };
    }
    let (obj, bytes) = state.commit(rt, key, Change::Upsert(new, applied));
    Written {
        obj,
        bytes,
        created: false,
    }
}

/// The real server's JSON patch (evanphx/json-patch) lets a `test` for
/// `null` pass on a path that does not exist — kube's finalizer helper
/// relies on it (`test /metadata/finalizers null`, then `add` the list) —
/// while the json-patch crate fails it. Such tests are dropped: they hold.
fn null_tests_pass_on_missing_paths(ops: json_patch::Patch, doc: &Value) -> json_patch::Patch {
    json_patch::Patch(
        ops.0
            .into_iter()
            .filter(|op| match op {
                json_patch::PatchOperation::Test(test) => {
                    !(test.value.is_null() && doc.pointer(test.path.as_str()).is_none())
                }
                _ => true,
            })
            .collect(),
    )
}
