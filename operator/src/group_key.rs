//! [`GroupKey`]: a ShardGroup by namespace and name, the one key of every
//! piece of per-group state the operator keeps (the controller's
//! [`crate::controller::groups`] registry and the endpoint's views, releases
//! and loads).

use kube::ResourceExt;

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

    /// The key of `group`.
    pub fn of(group: &ShardGroup) -> Self {
        Self::new(group.namespace().unwrap_or_default(), group.name_any())
    }
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
