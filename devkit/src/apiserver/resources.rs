//! The kinds the mock serves: [`ResourceType`] (group, version, kind,
//! plural, scope, status subresource) and the registry that resolves request
//! paths and `(apiVersion, kind)` pairs to them. Built-in kinds cover every
//! call shardring makes; a CustomResourceDefinition written to the server
//! registers its served versions as the real server does.

use parking_lot::RwLock;
use std::sync::Arc;

use serde_json::Value;

/// One served resource: a kind at one group version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `pods`.
    pub plural: String,
    /// Namespaced (`true`) or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource: writes to the main resource ignore
    /// `.status`, writes to `/status` change only `.status`.
    pub status_subresource: bool,
    /// A custom resource (served from a CRD): a replace must carry a
    /// `metadata.resourceVersion`, as for CRs on a real server.
    pub custom: bool,
}

impl ResourceType {
    /// A resource with no status subresource.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            namespaced,
            status_subresource: false,
            custom: false,
        }
    }

    /// The same resource with a `/status` subresource.
    #[must_use]
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// The same resource marked as a custom resource.
    #[must_use]
    pub fn into_custom(mut self) -> Self {
        self.custom = true;
        self
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of this resource, e.g. `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// `plural` or `plural.group`, as error messages name a resource.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Storage key: one collection per group, version and plural.
    pub(crate) fn key(&self) -> Arc<str> {
        Arc::from(format!("{}/{}/{}", self.group, self.version, self.plural))
    }

    /// Core v1 pods (graceful deletion, pod defaults).
    pub(crate) fn is_pod(&self) -> bool {
        self.group.is_empty() && self.plural == "pods"
    }

    /// Core v1 namespaces (cascading deletion).
    pub(crate) fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.plural == "namespaces"
    }

    /// apiextensions CustomResourceDefinitions (registration, Established).
    pub(crate) fn is_crd(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.plural == "customresourcedefinitions"
    }

    /// authentication TokenReviews (create only, never stored).
    pub(crate) fn is_token_review(&self) -> bool {
        self.group == "authentication.k8s.io" && self.plural == "tokenreviews"
    }
}

/// The kinds every mock serves.
fn builtin() -> Vec<ResourceType> {
    vec![
        ResourceType::new("", "v1", "Pod", "pods", true).with_status(),
        ResourceType::new("", "v1", "ConfigMap", "configmaps", true),
        ResourceType::new("", "v1", "Secret", "secrets", true),
        ResourceType::new("", "v1", "ServiceAccount", "serviceaccounts", true),
        ResourceType::new("", "v1", "Event", "events", true),
        ResourceType::new("", "v1", "Node", "nodes", false).with_status(),
        ResourceType::new("", "v1", "Namespace", "namespaces", false).with_status(),
        ResourceType::new("events.k8s.io", "v1", "Event", "events", true),
        ResourceType::new("coordination.k8s.io", "v1", "Lease", "leases", true),
        ResourceType::new("apps", "v1", "StatefulSet", "statefulsets", true).with_status(),
        ResourceType::new(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
        )
        .with_status(),
        ResourceType::new(
            "shardring.io",
            "v1alpha1",
            "ShardGroup",
            "shardgroups",
            true,
        )
        .with_status()
        .into_custom(),
        ResourceType::new(
            "shardring.io",
            "v1alpha1",
            "ConsumerPool",
            "consumerpools",
            true,
        )
        .with_status()
        .into_custom(),
        ResourceType::new(
            "authentication.k8s.io",
            "v1",
            "TokenReview",
            "tokenreviews",
            false,
        ),
    ]
}

/// The served kinds, built-in plus registered from CRDs.
#[derive(Debug)]
pub(crate) struct Registry {
    types: RwLock<Vec<Arc<ResourceType>>>,
}

impl Registry {
    /// The built-in kinds.
    pub fn new() -> Self {
        Registry {
            types: RwLock::new(builtin().into_iter().map(Arc::new).collect()),
        }
    }

    fn read(&self) -> parking_lot::RwLockReadGuard<'_, Vec<Arc<ResourceType>>> {
        self.types.read()
    }

    /// The kind served at `/{group}/{version}/{plural}`.
    pub fn by_path(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.read()
            .iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
            .cloned()
    }

    /// The kind named by an object's `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.read()
            .iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .cloned()
    }

    /// The kind with this plural (first registered), or with this
    /// `group/version/plural` (`version/plural` for core).
    pub fn by_name(&self, name: &str) -> Option<Arc<ResourceType>> {
        let parts: Vec<&str> = name.split('/').collect();
        match parts.as_slice() {
            [plural] => self.read().iter().find(|t| t.plural == *plural).cloned(),
            [version, plural] => self.by_path("", version, plural),
            [group, version, plural] => self.by_path(group, version, plural),
            _ => None,
        }
    }

    /// Registers the served versions of a CustomResourceDefinition object,
    /// as the apiextensions server starts serving them. Kinds already
    /// served are left as they are.
    pub fn register_crd(&self, crd: &Value) {
        let spec = &crd["spec"];
        let (Some(group), Some(kind), Some(plural)) = (
            spec["group"].as_str(),
            spec["names"]["kind"].as_str(),
            spec["names"]["plural"].as_str(),
        ) else {
            return;
        };
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        let Some(versions) = spec["versions"].as_array() else {
            return;
        };
        let mut types = self.types.write();
        for v in versions {
            let Some(version) = v["name"].as_str() else {
                continue;
            };
            if v["served"].as_bool() == Some(false)
                || types
                    .iter()
                    .any(|t| t.group == group && t.version == version && t.plural == plural)
            {
                continue;
            }
            let mut rt = ResourceType::new(group, version, kind, plural, namespaced).into_custom();
            rt.status_subresource = v["subresources"]["status"].is_object();
            types.push(Arc::new(rt));
        }
    }
}
