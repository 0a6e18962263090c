//! Direct access for tests, without HTTP: reads, and writes that go through
//! the same store paths as HTTP writes, so they produce the same
//! resourceVersions and watch events. Writes use the field
//! manager `shardring-devkit`. These are test helpers: a write the server
//! would refuse panics with the Status message.

use std::sync::Arc;

use serde_json::{Value, json};

use super::MockApiServer;
use super::resources::ResourceType;
use super::store::delete::DeleteOpts;
use super::store::obj_key;
use super::store::write::UpdateOp;

/// Field manager of direct writes.
const MANAGER: &str = "shardring-devkit";

/// Names a served resource for direct access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceRef {
    /// By `apiVersion` and `kind`, e.g. `("v1", "Pod")`.
    Kind {
        /// `group/version`, or `version` for the core group.
        api_version: String,
        /// The kind.
        kind: String,
    },
    /// By plural (`pods`) or `group/version/plural`
    /// (`shardring.io/v1alpha1/shardgroups`; `v1/pods` for core).
    Path(String),
}

impl From<&str> for ResourceRef {
    fn from(path: &str) -> Self {
        ResourceRef::Path(path.to_owned())
    }
}

impl From<(&str, &str)> for ResourceRef {
    fn from((api_version, kind): (&str, &str)) -> Self {
        ResourceRef::Kind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        }
    }
}

impl MockApiServer {
    fn resolve(&self, resource: &ResourceRef) -> Arc<ResourceType> {
        let registry = &self.shared.store.registry;
        match resource {
            ResourceRef::Kind { api_version, kind } => registry.by_kind(api_version, kind),
            ResourceRef::Path(path) => registry.by_name(path),
        }
        .unwrap_or_else(|| panic!("the mock does not serve {resource:?}"))
    }

    fn kind_of(&self, object: &Value) -> Arc<ResourceType> {
        let (api_version, kind) = (
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        );
        self.resolve(&(api_version, kind).into())
    }

    fn namespace_of<'a>(&'a self, object: &'a Value) -> &'a str {
        object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(&self.shared.options.namespace)
    }

    /// Creates `object` (with `apiVersion`, `kind`, `metadata`; the
    /// namespace defaults to the kubeconfig's). Unlike an HTTP create, a
    /// given `.status` is kept, as if a controller had written it at once.
    ///
    /// # Panics
    ///
    /// When the kind is not served or the create fails (e.g. it exists).
    pub fn create(&self, object: Value) -> Value {
        let rt = self.kind_of(&object);
        let ns = self.namespace_of(&object).to_owned();
        let written = self
            .shared
            .store
            .create(&rt, Some(&ns), object, MANAGER, true, false)
            .unwrap_or_else(|e| panic!("create: {e}"));
        (*written.obj).clone()
    }

    /// Creates many objects (as [`Self::create`]), one watch event each;
    /// returns the resourceVersion after the last.
    ///
    /// # Panics
    ///
    /// As [`Self::create`].
    pub fn create_many(&self, objects: Vec<Value>) -> u64 {
        for object in objects {
            let rt = self.kind_of(&object);
            let ns = self.namespace_of(&object).to_owned();
            self.shared
                .store
                .create(&rt, Some(&ns), object, MANAGER, true, false)
                .unwrap_or_else(|e| panic!("create_many: {e}"));
        }
        self.shared.store.resource_version()
    }

    /// Merge-patches `.status` through the status subresource: `status` is
    /// the patch of the status itself, e.g. `{"phase": "Running"}`.
    ///
    /// # Panics
    ///
    /// When the object does not exist or the kind has no status
    /// subresource.
    pub fn update_status(
        &self,
        resource: impl Into<ResourceRef>,
        ns: Option<&str>,
        name: &str,
        status: Value,
    ) -> Value {
        let rt = self.resolve(&resource.into());
        assert!(
            rt.status_subresource,
            "{} has no status subresource",
            rt.kind
        );
        let patch = UpdateOp::Merge(json!({ "status": status }));
        let written = self
            .shared
            .store
            .update(&rt, ns, name, true, patch, MANAGER)
            .unwrap_or_else(|e| panic!("update_status: {e}"));
        (*written.obj).clone()
    }

    /// Deletes as a default DELETE would (finalizers hold the object; a
    /// pod on a node waits for [`Self::kubelet_finish_deletion`]). `false`
    /// when it did not exist.
    pub fn delete(&self, resource: impl Into<ResourceRef>, ns: Option<&str>, name: &str) -> bool {
        let rt = self.resolve(&resource.into());
        self.shared
            .store
            .delete(&rt, ns, name, &DeleteOpts::default())
            .is_ok()
    }

    /// The stored object, if any.
    ///
    /// # Panics
    ///
    /// When the kind is not served.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let rt = self.resolve(&(api_version, kind).into());
        let state = self.shared.store.lock();
        state
            .entry(&rt, &obj_key(&rt, ns, name))
            .map(|e| (*e.obj).clone())
    }

    /// Every stored object of the kind in `ns` (all namespaces when
    /// `None`), sorted by namespace and name.
    ///
    /// # Panics
    ///
    /// When the kind is not served.
    pub fn list(&self, api_version: &str, kind: &str, ns: Option<&str>) -> Vec<Value> {
        let rt = self.resolve(&(api_version, kind).into());
        self.shared.store.all(&rt, ns)
    }

    /// The kubelet's confirmation that pod `ns/name`, being deleted, has
    /// stopped: it goes (unless finalizers hold it). `false` when no such
    /// pod is being deleted.
    pub fn kubelet_finish_deletion(&self, ns: &str, name: &str) -> bool {
        self.shared.store.kubelet_finish_deletion(ns, name)
    }
}
