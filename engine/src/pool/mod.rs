//! Pool-wide balance: the pods of one ConsumerPool (or of pools that share
//! pods) serve several ShardGroups, and the balance that counts is over
//! everything a pod serves.
//!
//! - Count mode: the ⌈⌉ quotas of every group are dealt together
//!   ([`deal`], in `deal.rs`), and each group's plan takes its row
//!   (`PlanInput::ceilings`).
//! - Standbys: each group's standby slots are dealt the same way over the
//!   groups with standbys (`PlanInput::standby_ceilings`).
//! - Throughput mode: each group's plan counts the load the pool's other
//!   groups put on every pod (`PlanInput::pool_load`, summed by
//!   [`PoolLoads`] in `load.rs`) and moves its own shards to bring every
//!   pod's whole load into the band.
//!
//! [`plan_together`] plans a whole pool in one call, as the operator does
//! over a pool's reconciles (the comparison bench and the tests).

mod deal;
mod input;
mod load;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use deal::deal;
pub use input::{Ceilings, PoolGroup, PoolInput};
pub use load::PoolLoads;

use crate::PlanError;
use crate::model::readable_count;
use crate::types::{MoveKind, PlanInput, PlanOutput, Previous, ShardMove};

/// Plans every group of one pool together, as the operator does over a
/// pool's reconciles (the comparison bench and the tests): deals the ⌈⌉
/// quotas of the count-mode groups and the standby slots of the groups
/// with standbys from what each input's `previous` holds, plans each group
/// with its rows, and plans the throughput groups one after another (in
/// name order), each with the load the others put on every pod as they
/// stand then (planned already, or as `previous` has them). Every input
/// names the pool's pods; the first input's pods and `maxShardsPerPod` are
/// the deal's.
pub fn plan_together(
    groups: &BTreeMap<String, PlanInput>,
) -> Result<BTreeMap<String, PlanOutput>, PlanError> {
    let Some(first) = groups.values().next() else {
        return Ok(BTreeMap::new());
    };
    let dealt = |units: &dyn Fn(&PlanInput) -> Option<Units>| {
        let pool = PoolInput {
            pods: first.pods.clone(),
            max_shards_per_pod: first.options.max_shards_per_pod,
            groups: groups
                .iter()
                .filter_map(|(name, input)| {
                    let (readable, holdings) = units(input)?;
                    Some(PoolGroup {
                        name: name.clone(),
                        readable,
                        holdings,
                        ..PoolGroup::default()
                    })
                })
                .collect(),
        };
        (pool.groups.len() > 1).then(|| deal(&pool))
    };
    let ceilings = dealt(&|input| {
        input
            .options
            .balance
            .counts_shards()
            .then(|| (readable_count(&input.shards), owners_per_pod(input)))
    });
    let eligible = first
        .pods
        .iter()
        .filter(|p| p.ready && !p.terminating)
        .count() as u64;
    let standby_ceilings = dealt(&|input| {
        let per_shard = u64::from(input.options.standbys).min(eligible.saturating_sub(1));
        (per_shard > 0).then(|| {
            (
                readable_count(&input.shards) * per_shard,
                standbys_per_pod(input),
            )
        })
    });
    let row =
        |rows: &Option<Ceilings>, name: &str| rows.as_ref().and_then(|c| c.get(name)).cloned();
    let mut outputs = BTreeMap::new();
    let mut throughput = Vec::new();
    for (name, input) in groups {
        let input = PlanInput {
            ceilings: row(&ceilings, name),
            standby_ceilings: row(&standby_ceilings, name),
            ..input.clone()
        };
        if input.options.balance.weighs_load() {
            throughput.push((name, input));
        } else {
            outputs.insert(name.clone(), crate::plan(&input)?);
        }
    }
    plan_throughput(throughput, &mut outputs)?;
    Ok(outputs)
}

/// What a group puts into a deal: its units (shards or standby slots) and
/// how many of them each pod holds now.
type Units = (u64, BTreeMap<String, u64>);

/// Most rounds of the throughput groups' plans in [`plan_together`].
const ROUNDS: usize = 16;

/// Plans the throughput groups one after another, each with the load the
/// others put on every pod as they stand then, and again, round after
/// round, until a round moves nothing (as the operator's peers plan again
/// after one moved): a group cannot move its peers' shards off a pod, so
/// the pool settles over several of them. Each output's moves are counted
/// from its input's `previous` (a shard moved in several rounds is one
/// move, required if any round had to move it).
fn plan_throughput(
    groups: Vec<(&String, PlanInput)>,
    outputs: &mut BTreeMap<String, PlanOutput>,
) -> Result<(), PlanError> {
    let mut loads = PoolLoads::default();
    let measured: Vec<bool> = groups
        .iter()
        .map(|(name, input)| {
            let owners = input.previous.iter().map(|(s, p)| (s.as_str(), p.owner()));
            loads.add(name, owners, &input.loads)
        })
        .collect();
    let mut kinds: BTreeMap<(&str, String), MoveKind> = BTreeMap::new();
    let mut last: BTreeMap<&str, PlanOutput> = BTreeMap::new();
    for round in 0..ROUNDS {
        let mut moved = false;
        for ((name, input), &measured) in groups.iter().zip(&measured) {
            let mut input = input.clone();
            if let Some(out) = last.get(name.as_str()) {
                input.previous = Arc::new(previous_of(out));
            }
            if measured {
                input.pool_load = loads.others(name);
            }
            let output = crate::plan(&input)?;
            moved |= round == 0 || output.moves > 0;
            for m in &output.move_list {
                let kind = kinds
                    .entry((name.as_str(), m.shard.clone()))
                    .or_insert(m.kind);
                if m.kind == MoveKind::Required {
                    *kind = MoveKind::Required;
                }
            }
            let owners = output
                .assignment
                .iter()
                .filter_map(|(s, a)| Some((s.as_str(), a.owner.as_deref()?)));
            loads.add(name, owners, &input.loads);
            last.insert(name.as_str(), output);
        }
        if !moved {
            break;
        }
    }
    for (name, input) in groups {
        let Some(mut output) = last.remove(name.as_str()) else {
            continue;
        };
        output.move_list = output
            .assignment
            .iter()
            .filter_map(|(shard, a)| {
                let from = input.previous.get(shard)?.owner();
                let to = a.owner.as_deref()?;
                (from != to).then(|| ShardMove {
                    shard: shard.clone(),
                    from: from.to_owned(),
                    to: to.to_owned(),
                    kind: kinds
                        .get(&(name.as_str(), shard.clone()))
                        .copied()
                        .unwrap_or(MoveKind::Optional),
                })
            })
            .collect();
        output.moves = output.move_list.len() as u64;
        outputs.insert(name.clone(), output);
    }
    Ok(())
}

/// An output's owners and standbys as the `previous` of the next plan.
fn previous_of(output: &PlanOutput) -> BTreeMap<String, Previous> {
    output
        .assignment
        .iter()
        .filter_map(|(id, a)| {
            let owner = a.owner.clone()?;
            let previous = if a.standbys.is_empty() {
                Previous::Owner(owner)
            } else {
                Previous::Full {
                    owner,
                    standbys: a.standbys.clone(),
                }
            };
            Some((id.clone(), previous))
        })
        .collect()
}

/// Each pod's shards in `input.previous`.
fn owners_per_pod(input: &PlanInput) -> BTreeMap<String, u64> {
    let mut holdings = BTreeMap::new();
    for previous in input.previous.values() {
        *holdings.entry(previous.owner().to_owned()).or_insert(0) += 1;
    }
    holdings
}

/// Each pod's standby slots in `input.previous`.
fn standbys_per_pod(input: &PlanInput) -> BTreeMap<String, u64> {
    let mut holdings = BTreeMap::new();
    for pod in input.previous.values().flat_map(|p| p.standbys()) {
        *holdings.entry(pod.clone()).or_insert(0) += 1;
    }
    holdings
}

/// Each pod's shards over every group's plan (`PlanOutput::loads` summed).
pub fn totals(outputs: &BTreeMap<String, PlanOutput>) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for out in outputs.values() {
        for (pod, load) in &out.loads {
            *totals.entry(pod.clone()).or_insert(0) += load;
        }
    }
    totals
}
