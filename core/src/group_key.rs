//! [`GroupKey`]: a ShardGroup by namespace and name, the one key of every
//! piece of per-group state the operator keeps (the controller's group
//! registry and the endpoint's views, releases and loads).

use crate::crds::ShardGroup;

/// A ShardGroup, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl GroupKey {
    /// The key of `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of `group` (its `generateName` while it has no name yet, as
    /// kube's `ResourceExt::name_any`).
    pub fn of(group: &ShardGroup) -> Self {
        let meta = &group.metadata;
        let name = meta.name.as_ref().or(meta.generate_name.as_ref());
        Self::new(
            meta.namespace.clone().unwrap_or_default(),
            name.cloned().unwrap_or_default(),
        )
    }
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
