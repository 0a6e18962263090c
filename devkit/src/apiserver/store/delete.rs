//! Deletion as the real server does it: finalizers holding an
//! object with a `deletionTimestamp`, graceful pod deletion that waits for the
//! kubelet's confirmation, force deletion, and namespaces that delete their
//! contents and go once empty. Delete preconditions are not emulated (no
//! client here sends them; the real server's are checked in
//! `e2e/tests/it/api_semantics.rs`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::super::meta;
use super::super::resources::ResourceType;
use super::super::status::ApiError;
use super::write::{finish_write, ready_to_remove};
use super::{Change, ObjKey, State, Store, Written, obj_key};

/// DeleteOptions that matter here.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOpts {
    /// `gracePeriodSeconds` (body or query); `Some(0)` forces.
    pub grace: Option<i64>,
}

/// The outcome of a delete.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// The object stays, with a `deletionTimestamp` (finalizers or a pod's
    /// grace period).
    Pending(Written),
    /// The object is gone; its last state.
    Removed(Written),
}

/// The grace period a delete gives `obj`: only pods bound to a node and
/// not finished get one.
fn grace_period(rt: &ResourceType, obj: &Value, requested: Option<i64>) -> i64 {
    if !rt.is_pod() {
        return 0;
    }
    let bound = obj["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        obj["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    if !bound || finished {
        return 0;
    }
    requested
        .or_else(|| obj["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
        .max(0)
}

impl State {
    /// Whether namespace `ns` exists and is being deleted.
    pub fn namespace_terminating(&self, ns: &str) -> bool {
        self.collections
            .values()
            .find(|c| c.rt.is_namespace())
            .and_then(|c| c.objects.get(&(String::new(), ns.to_owned())))
            .is_some_and(|e| e.obj["metadata"].get("deletionTimestamp").is_some())
    }

    fn namespace_empty(&self, ns: &str) -> bool {
        self.collections
            .values()
            .filter(|c| c.rt.namespaced)
            .all(|c| {
                c.objects
                    .range((ns.to_owned(), String::new())..)
                    .next()
                    .is_none_or(|((n, _), _)| n != ns)
            })
    }

    /// After an object of namespace `ns` went: a terminating namespace that
    /// is now empty goes too.
    pub fn after_removal(&mut self, ns: &str) {
        if ns.is_empty() || !self.namespace_terminating(ns) || !self.namespace_empty(ns) {
            return;
        }
        let Some(rt) = self.registry.by_path("", "v1", "namespaces") else {
            return;
        };
        let key = (String::new(), ns.to_owned());
        let Some(entry) = self.entry(&rt, &key) else {
            return;
        };
        let mut obj = (*entry.obj).clone();
        if obj["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            obj["spec"]["finalizers"] = json!([]);
            self.commit(&rt, key, Change::Remove(obj));
        }
    }

    /// Deletes one object under the lock.
    pub fn delete_locked(
        &mut self,
        rt: &Arc<ResourceType>,
        key: ObjKey,
        opts: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        let name = key.1.clone();
        let Some(entry) = self.entry(rt, &key) else {
            return Err(ApiError::not_found(rt, &name));
        };
        let old = entry.obj.clone();
        let applied = entry.applied.clone();
        let grace = grace_period(rt, &old, opts.grace);
        let mut new = (*old).clone();
        let m = &mut new["metadata"];
        let pending_grace = m["deletionGracePeriodSeconds"].as_i64();
        match pending_grace {
            // Already being deleted: a delete may only shorten the grace period.
            Some(current) if grace >= current => {
                return Ok(Deleted::Pending(Written {
                    obj: old,
                    bytes: entry.bytes.clone(),
                    created: false,
                }));
            }
            Some(_) => {
                m["deletionGracePeriodSeconds"] = json!(grace);
                m["deletionTimestamp"] = json!(meta::timestamp(grace));
            }
            None => {
                m["deletionTimestamp"] = json!(meta::timestamp(grace));
                m["deletionGracePeriodSeconds"] = json!(grace);
                if let Some(g) = m["generation"].as_i64() {
                    m["generation"] = json!(g + 1);
                }
            }
        }
        if rt.is_namespace() {
            return Ok(self.delete_namespace(rt, key, new, applied));
        }
        let removed = ready_to_remove(&new);
        let written = finish_write(self, rt, key, new, applied);
        Ok(if removed {
            Deleted::Removed(written)
        } else {
            Deleted::Pending(written)
        })
    }

    /// A namespace goes Terminating, deletes its contents, and goes when
    /// empty.
    fn delete_namespace(
        &mut self,
        rt: &Arc<ResourceType>,
        key: ObjKey,
        mut ns_obj: Value,
        applied: super::Applied,
    ) -> Deleted {
        let ns = key.1.clone();
        ns_obj["status"]["phase"] = json!("Terminating");
        // spec.finalizers ("kubernetes") holds it until its contents are gone.
        let (obj, bytes) = self.commit(rt, key, Change::Upsert(ns_obj, applied));
        let pending = Written {
            obj,
            bytes,
            created: false,
        };
        let contents: Vec<(Arc<ResourceType>, ObjKey)> = self
            .collections
            .values()
            .filter(|c| c.rt.namespaced)
            .flat_map(|c| {
                c.objects
                    .range((ns.clone(), String::new())..)
                    .take_while(|((n, _), _)| *n == ns)
                    .map(|(k, _)| (c.rt.clone(), k.clone()))
            })
            .collect();
        for (rt, key) in contents {
            let _ = self.delete_locked(&rt, key, &DeleteOpts::default());
        }
        self.after_removal(&ns);
        let ns_rt = rt.clone();
        match self.entry(&ns_rt, &(String::new(), ns)) {
            Some(_) => Deleted::Pending(pending),
            None => Deleted::Removed(pending),
        }
    }
}

impl Store {
    /// Deletes an object (DELETE).
    pub fn delete(
        &self,
        rt: &Arc<ResourceType>,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        self.lock().delete_locked(rt, obj_key(rt, ns, name), opts)
    }

    /// The kubelet's confirmation that a terminating pod stopped: its grace
    /// period drops to 0 and it goes unless finalizers hold it. `false`
    /// when there is no such pod being deleted.
    pub fn kubelet_finish_deletion(&self, ns: &str, name: &str) -> bool {
        let mut state = self.lock();
        let Some(rt) = self.registry.by_path("", "v1", "pods") else {
            return false;
        };
        let key = obj_key(&rt, Some(ns), name);
        let Some(entry) = state.entry(&rt, &key) else {
            return false;
        };
        if entry.obj["metadata"].get("deletionTimestamp").is_none() {
            return false;
        }
        let mut new = (*entry.obj).clone();
        let applied = entry.applied.clone();
        new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        finish_write(&mut state, &rt, key, new, applied);
        true
    }
}
