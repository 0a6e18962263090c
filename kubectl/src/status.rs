//! `kubectl shardring status`: every ShardGroup and ConsumerPool of the
//! namespace in one table each (shards, pods, epoch, moves in flight,
//! held shards, the conditions' status and reason), then what needs a look:
//! each condition that is not as it should be, with its message.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use shardring::controller::snapshot::Snapshot;

use crate::table::Table;

/// `True Published`, or `-` without the condition.
fn cell(conditions: &[Condition], type_: &str) -> String {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map_or_else(|| "-".to_owned(), |c| format!("{} {}", c.status, c.reason))
}

/// Whether `condition` is what a healthy object shows: `Degraded` and
/// `OrderingNotEnforced` False is good, every other type True (`Progressing`
/// either way: handoffs are normal, and `OrderingNotEnforced=True` is a
/// standing property of a group without a lease table, said in `api.md`).
fn needs_a_look(condition: &Condition) -> bool {
    match condition.type_.as_str() {
        "Degraded" => condition.status == "True",
        "Progressing" | "OrderingNotEnforced" => false,
        _ => condition.status != "True",
    }
}

/// One line per condition of `kind` `name` that needs a look.
fn looks_at(kind: &str, name: &str, conditions: &[Condition]) -> Vec<String> {
    conditions
        .iter()
        .filter(|c| needs_a_look(c))
        .map(|c| {
            format!(
                "{kind} {name}: {}={} {}: {}",
                c.type_, c.status, c.reason, c.message
            )
        })
        .collect()
}

/// The status text.
pub fn render(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    let mut looks = Vec::new();
    let mut groups = Table::new(&[
        "SHARDGROUP",
        "POOL",
        "SOURCE",
        "SHARDS",
        "PODS",
        "EPOCH",
        "MOVING",
        "HELD",
        "READY",
        "BALANCED",
        "PROGRESSING",
    ]);
    for group in snapshot.groups() {
        let name = group.name_any();
        let status = group.status.clone().unwrap_or_default();
        groups.row(vec![
            name.clone(),
            group.spec.pool_ref.name.clone(),
            status.source.clone().unwrap_or_else(|| "-".into()),
            status.shards.total.to_string(),
            status.pods.eligible.to_string(),
            status.epoch.to_string(),
            status.moves_in_flight.to_string(),
            status.shards.held.to_string(),
            cell(&status.conditions, "Ready"),
            cell(&status.conditions, "Balanced"),
            cell(&status.conditions, "Progressing"),
        ]);
        let generation = group.metadata.generation.unwrap_or(0);
        if status.observed_generation.unwrap_or(0) < generation {
            looks.push(format!(
                "ShardGroup {name}: generation {generation} not observed yet (status is of {})",
                status.observed_generation.unwrap_or(0)
            ));
        }
        looks.extend(looks_at("ShardGroup", &name, &status.conditions));
    }
    let mut pools = Table::new(&[
        "CONSUMERPOOL",
        "PODS",
        "READY-PODS",
        "GROUPS",
        "SHARDS",
        "PER-POD",
        "READY",
    ]);
    for pool in snapshot.pools() {
        let name = pool.name_any();
        let status = pool.status.clone().unwrap_or_default();
        let per_pod = match (status.fewest_shards_per_pod, status.most_shards_per_pod) {
            (Some(fewest), Some(most)) => format!("{fewest}-{most}"),
            _ => "-".into(),
        };
        pools.row(vec![
            name.clone(),
            status.pods.to_string(),
            status.ready_pods.to_string(),
            status.groups.to_string(),
            status.shards.to_string(),
            per_pod,
            cell(&status.conditions, "Ready"),
        ]);
        looks.extend(looks_at("ConsumerPool", &name, &status.conditions));
    }
    if groups.is_empty() && pools.is_empty() {
        return format!(
            "no ShardGroups or ConsumerPools in namespace {}\n",
            snapshot.namespace()
        );
    }
    out.push_str(&groups.render());
    out.push('\n');
    out.push_str(&pools.render());
    if !looks.is_empty() {
        out.push_str("\nneeds a look:\n");
        for look in looks {
            out.push_str(&format!("  {look}\n"));
        }
    }
    out
}
