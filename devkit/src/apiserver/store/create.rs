//! Creating an object (POST, or a server-side apply of an absent one) with
//! the real server's rules: a name (generateName is not served), the namespace of the URL
//! or the body (refused while the namespace terminates), a 409 for an
//! existing name, the system metadata it owns set afresh (uid,
//! creationTimestamp, generation), status and defaults initialised, a CRD
//! established and served, and, for an apply, the fields it applied recorded.
//! The name checks and the system metadata are replace's and patch's too
//! ([`super::write`]).

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::applied::{self, Applied};
use super::super::meta::{self, meta_mut, meta_str};
use super::super::resources::ResourceType;
use super::super::status::ApiError;
use super::{Change, State, Store, Written, obj_key};

/// Fields of `metadata` only the server sets.
pub(super) const SYSTEM_META: [&str; 8] = [
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "managedFields",
    "selfLink",
];

pub(super) fn check_names(
    rt: &ResourceType,
    obj: &Value,
    ns: Option<&str>,
    name: &str,
) -> Result<(), ApiError> {
    if let Some(n) = meta_str(obj, "name").filter(|n| *n != name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    if rt.namespaced
        && let Some(n) = meta_str(obj, "namespace").filter(|n| Some(*n) != ns)
    {
        return Err(ApiError::bad_request(format!(
            "the namespace of the provided object ({n}) does not match the namespace sent on the request ({})",
            ns.unwrap_or_default()
        )));
    }
    if let Some(kind) = obj["kind"].as_str().filter(|k| *k != rt.kind) {
        return Err(ApiError::bad_request(format!(
            "the kind of the provided object ({kind}) does not match the resource ({})",
            rt.kind
        )));
    }
    Ok(())
}

impl Store {
    /// Creates an object (POST, or an apply of an absent object when
    /// `apply` is set). `keep_status` keeps the body's `.status` for kinds
    /// with a status subresource (direct test writes only).
    pub fn create(
        &self,
        rt: &Arc<ResourceType>,
        ns: Option<&str>,
        body: Value,
        manager: &str,
        keep_status: bool,
        apply: bool,
    ) -> Result<Written, ApiError> {
        let mut state = self.lock();
        create_locked(&mut state, rt, ns, body, manager, keep_status, apply)
    }
}

/// A create under the lock (see [`Store::create`]).
pub(super) fn create_locked(
    state: &mut State,
    rt: &Arc<ResourceType>,
    ns: Option<&str>,
    mut obj: Value,
    manager: &str,
    keep_status: bool,
    apply: bool,
) -> Result<Written, ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body must be an object"));
    }
    let name = match meta_str(&obj, "name") {
        Some(n) if !n.is_empty() => n.to_owned(),
        _ => {
            return Err(ApiError::invalid(
                rt,
                "",
                "metadata.name: Required value: name is required (generateName is not served by the mock API server)",
            ));
        }
    };
    let ns = if rt.namespaced {
        let ns = ns
            .or_else(|| meta_str(&obj, "namespace"))
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::bad_request("a namespaced object needs a namespace"))?
            .to_owned();
        Some(ns)
    } else {
        None
    };
    check_names(
        rt,
        &obj,
        ns.as_deref(),
        meta_str(&obj, "name").unwrap_or(&name),
    )?;
    let key = obj_key(rt, ns.as_deref(), &name);
    if state.entry(rt, &key).is_some() {
        return Err(ApiError::already_exists(rt, &name));
    }
    if let Some(ns) = &ns
        && state.namespace_terminating(ns)
    {
        return Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                rt.qualified()
            ),
        ));
    }
    obj["apiVersion"] = json!(rt.api_version());
    obj["kind"] = json!(rt.kind);
    let m = meta_mut(&mut obj);
    for k in SYSTEM_META {
        m.remove(k);
    }
    m.insert("name".into(), json!(name));
    match &ns {
        Some(ns) => m.insert("namespace".into(), json!(ns)),
        None => m.remove("namespace"),
    };
    let now = meta::timestamp(0);
    m.insert("uid".into(), json!(meta::new_uid()));
    m.insert("creationTimestamp".into(), json!(now));
    m.insert("generation".into(), json!(1));
    if rt.status_subresource && (!keep_status || obj.get("status").is_none_or(Value::is_null)) {
        obj.as_object_mut().map(|o| o.remove("status"));
        if let Some(status) = meta::initial_status(rt) {
            obj["status"] = status;
        }
    }
    meta::apply_create_defaults(rt, &mut obj);
    if rt.is_crd() {
        meta::establish_crd(&mut obj);
        state.registry.register_crd(&obj);
    }
    let mut applied = Applied::default();
    if apply {
        applied.record(manager, false, applied::leaf_paths(&obj));
    }
    let (obj, bytes) = state.commit(rt, key, Change::Upsert(obj, applied));
    Ok(Written {
        obj,
        bytes,
        created: true,
    })
}
