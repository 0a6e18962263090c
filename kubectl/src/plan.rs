//! `kubectl shardring plan --replicas N`: what the operator would move if a
//! ConsumerPool had N eligible pods, computed by the operator's own plan
//! step on a snapshot of the cluster (`shardring::controller::what_if`),
//! writing nothing: the moves of each group, and each pod's shards over
//! the pool's groups now and afterwards.

use kube::ResourceExt;
use shardring::controller::snapshot::Snapshot;
use shardring::controller::what_if::what_if;

use crate::table::Table;

/// The pool to plan: `pool`, or the namespace's only one.
fn pool_name(snapshot: &Snapshot, pool: Option<&str>) -> anyhow::Result<String> {
    if let Some(pool) = pool {
        return Ok(pool.to_owned());
    }
    match snapshot.pools() {
        [only] => Ok(only.name_any()),
        [] => anyhow::bail!("no ConsumerPool in namespace {}", snapshot.namespace()),
        several => anyhow::bail!(
            "namespace {} has {} ConsumerPools ({}): say which with --pool",
            snapshot.namespace(),
            several.len(),
            several
                .iter()
                .map(ResourceExt::name_any)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `fewest-most` of `values`.
fn spread<'a>(values: impl Iterator<Item = &'a u64> + Clone) -> String {
    match (values.clone().min(), values.max()) {
        (Some(fewest), Some(most)) => format!("{fewest}-{most}"),
        _ => "-".into(),
    }
}

/// The what-if text.
///
/// # Errors
/// No such pool, or new pods asked of a pool whose selector has no
/// `matchLabels`.
pub fn render(
    mut snapshot: Snapshot,
    pool: Option<&str>,
    replicas: usize,
) -> anyhow::Result<String> {
    let pool = pool_name(&snapshot, pool)?;
    let plan = what_if(&mut snapshot, &pool, replicas)?;
    let mut out = format!(
        "what if ConsumerPool {pool} had {replicas} eligible pods (it has {})",
        plan.replicas_now
    );
    if !plan.added.is_empty() {
        out.push_str(&format!(": adds {}", plan.added.join(", ")));
    }
    if !plan.removed.is_empty() {
        out.push_str(&format!(": removes {}", plan.removed.join(", ")));
    }
    out.push_str("\n\n");
    let mut groups = Table::new(&[
        "SHARDGROUP",
        "REQUIRED",
        "OPTIONAL",
        "SHARDS-PER-POD",
        "PROBLEM",
    ]);
    let (mut required, mut optional) = (0, 0);
    for group in &plan.groups {
        required += group.required;
        optional += group.optional;
        groups.row(vec![
            group.group.clone(),
            group.required.to_string(),
            group.optional.to_string(),
            format!("{}-{}", group.spread.0, group.spread.1),
            group.problem.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    out.push_str(&groups.render());
    out.push_str(&format!(
        "\npool: {} moves ({required} required, {optional} optional); shards per pod {} (now {})\n\n",
        required + optional,
        spread(plan.after.values()),
        spread(plan.before.values()),
    ));
    let mut pods = Table::new(&["POD", "NOW", "AFTER"]);
    let names: std::collections::BTreeSet<&String> =
        plan.before.keys().chain(plan.after.keys()).collect();
    for name in names {
        let cell = |map: &std::collections::BTreeMap<String, u64>| {
            map.get(name).map_or_else(|| "-".to_owned(), u64::to_string)
        };
        pods.row(vec![name.clone(), cell(&plan.before), cell(&plan.after)]);
    }
    out.push_str(&pods.render());
    out.push_str(
        "\nplanned with pacing lifted: the operator makes the optional moves after rebalance.delay and \
         within rebalance.maxMovesPerWindow; each move is a handoff (revoke, then the next owner)\n",
    );
    Ok(out)
}
