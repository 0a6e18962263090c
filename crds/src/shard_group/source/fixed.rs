//! A static source: a fixed number of partitions named from a template
//! (`orders-{index}`), for partition queues whose set only a spec change
//! alters.

use std::time::Duration;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A fixed set of partitions named from a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticSource {
    /// Number of partitions, 1 to 100000. May be changed: new partitions are
    /// assigned, removed ones are revoked.
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100000").message("static.count must be between 1 and 100000"))]
    pub count: u32,
    /// Name of each partition; `{index}` is replaced by 0..count-1 and must
    /// appear (at most 200 characters). Default `partition-{index}`.
    #[serde(default = "default_name_template")]
    #[schemars(length(max = 200))]
    #[x_kube(validation = Rule::new("size(self) <= 200 && self.contains('{index}')").message("static.nameTemplate must contain {index} (replaced by 0..count-1), e.g. orders-{index}, and be at most 200 characters"))]
    pub name_template: String,
}

fn default_name_template() -> String {
    "partition-{index}".into()
}

impl StaticSource {
    /// How often a static source is looked at again: it cannot change
    /// without a spec change, which triggers a reconcile anyway.
    pub const REFRESH: Duration = Duration::from_secs(300);

    /// Short description for the `Source` printer column: `static:<count>`.
    pub(super) fn summary(&self) -> String {
        format!("static:{}", self.count)
    }

    /// Name of partition `index`: the template with `{index}` replaced.
    pub fn partition_name(&self, index: u32) -> String {
        self.name_template.replace("{index}", &index.to_string())
    }

    /// Names of all `count` partitions, in index order.
    pub fn partition_names(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.count).map(|index| self.partition_name(index))
    }
}
