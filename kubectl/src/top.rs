//! `kubectl shardring top`: the namespace's pods by the shards they read
//! over all ShardGroups (active, standby, revoking, held), with the groups
//! they read and their capacity, most loaded first. Per-pod throughput is
//! not in any object the operator writes (the endpoint's load reports stay
//! in the leader's memory): a group balanced by throughput shows its
//! measured spread beside the table instead.

use std::collections::BTreeMap;

use kube::ResourceExt;
use shardring::controller::snapshot::Snapshot;

use crate::table::Table;

#[derive(Default)]
struct Reads {
    active: usize,
    standby: usize,
    revoking: usize,
    held: usize,
    groups: Vec<String>,
}

/// The top text.
pub fn render(snapshot: &Snapshot) -> String {
    let mut pods: BTreeMap<String, Reads> = BTreeMap::new();
    let mut loads = Vec::new();
    for group in snapshot.groups() {
        if let Some(throughput) = group.status.as_ref().and_then(|s| s.throughput.as_ref()) {
            loads.push(format!(
                "ShardGroup {}: {} KB/s measured, load ÷ fair share {}, {} pods outside the band",
                group.name_any(),
                throughput.total_kbps,
                throughput.spread.as_deref().unwrap_or("-"),
                throughput.out_of_band_pods
            ));
        }
        let Some(document) = snapshot.document(group) else {
            continue;
        };
        for (pod, entry) in &document.pods {
            let reads = pods.entry(pod.clone()).or_default();
            reads.active += entry.active.len();
            reads.standby += entry.standby.len();
            reads.revoking += entry.revoking.len();
            reads.held += entry.held.len();
            if !entry.active.is_empty() {
                reads.groups.push(group.name_any());
            }
        }
    }
    if pods.is_empty() {
        return format!(
            "no published assignment in namespace {} names a pod\n",
            snapshot.namespace()
        );
    }
    let capacity_of = |pod: &str| -> String {
        let Some(object) = snapshot.pods().iter().find(|p| p.name_any() == pod) else {
            return "gone".into();
        };
        snapshot
            .pools()
            .iter()
            .find_map(|pool| {
                let label = pool.spec.capacity.label.as_deref()?;
                object.labels().get(label).cloned()
            })
            .unwrap_or_else(|| "default".into())
    };
    let mut rows: Vec<(&String, &Reads)> = pods.iter().collect();
    rows.sort_by(|a, b| b.1.active.cmp(&a.1.active).then(a.0.cmp(b.0)));
    let mut table = Table::new(&[
        "POD", "ACTIVE", "STANDBY", "REVOKING", "HELD", "CAPACITY", "GROUPS",
    ]);
    for (pod, reads) in rows {
        table.row(vec![
            pod.clone(),
            reads.active.to_string(),
            reads.standby.to_string(),
            reads.revoking.to_string(),
            reads.held.to_string(),
            capacity_of(pod),
            reads.groups.join(","),
        ]);
    }
    let mut out = table.render();
    for load in loads {
        out.push_str(&format!("{load}\n"));
    }
    out
}
