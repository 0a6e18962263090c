//! The names every object the operator writes carries: its field manager
//! and its labels.

/// The field manager of every write the operator makes.
pub const MANAGER: &str = "shardring";
/// Label every object the operator creates carries.
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub(crate) const MANAGED_BY: &str = "shardring";
/// Label naming the ShardGroup an object belongs to.
pub(crate) const GROUP_LABEL: &str = "shardring.io/shard-group";
