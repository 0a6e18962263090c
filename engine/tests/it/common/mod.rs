//! Builders shared by the engine's integration tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use shardring_engine::{
    Balance, HashKeyRange, PlanInput, PlanOptions, PlanOutput, Pod, Previous, Rebalance, Shard,
    ShardState,
};

/// `n` open shards named like Kinesis shards.
pub fn shards(n: usize) -> Vec<Shard> {
    (0..n).map(|i| shard(&format!("shardId-{i:012}"))).collect()
}

/// One open shard without a hash key range.
pub fn shard(id: &str) -> Shard {
    Shard {
        id: id.to_owned(),
        hash_key_range: None,
        parents: Vec::new(),
        state: ShardState::Open,
    }
}

/// `n` shards splitting the key space into equal contiguous ranges.
pub fn ranged_shards(n: usize) -> Vec<Shard> {
    let step = u128::MAX / n as u128;
    (0..n)
        .map(|i| {
            let start = step * i as u128;
            let end = if i + 1 == n {
                u128::MAX
            } else {
                step * (i as u128 + 1) - 1
            };
            Shard {
                hash_key_range: Some(HashKeyRange {
                    start: start.to_string(),
                    end: end.to_string(),
                }),
                ..shard(&format!("shardId-{i:012}"))
            }
        })
        .collect()
}

/// One ready pod.
pub fn pod(name: &str) -> Pod {
    Pod {
        name: name.to_owned(),
        ready: true,
        terminating: false,
        capacity: 1,
        zone: None,
        node: None,
        ready_since: None,
    }
}

/// `n` ready pods `consumer-0..n`.
pub fn pods(n: usize) -> Vec<Pod> {
    (0..n).map(|i| pod(&format!("consumer-{i}"))).collect()
}

/// A count-mode input with no previous assignment.
pub fn input(shards: Vec<Shard>, pods: Vec<Pod>) -> PlanInput {
    PlanInput {
        options: PlanOptions {
            consumer_name: "orders".to_owned(),
            ..PlanOptions::default()
        },
        shards: shards.into(),
        pods,
        previous: Default::default(),
        loads: BTreeMap::new(),
        ceilings: None,
        ..PlanInput::default()
    }
}

/// The output's owners as a `previous` map for the next plan.
pub fn previous_of(output: &PlanOutput) -> Arc<BTreeMap<String, Previous>> {
    output
        .assignment
        .iter()
        .filter_map(|(id, a)| {
            let owner = a.owner.clone()?;
            Some((
                id.clone(),
                if a.standbys.is_empty() {
                    Previous::Owner(owner)
                } else {
                    Previous::Full {
                        owner,
                        standbys: a.standbys.clone(),
                    }
                },
            ))
        })
        .collect::<BTreeMap<_, _>>()
        .into()
}

/// Plans, panicking on error.
pub fn run(input: &PlanInput) -> PlanOutput {
    shardring_engine::plan(input).expect("plan")
}

/// Owner loads, including pods with zero shards.
pub fn loads(output: &PlanOutput) -> Vec<u64> {
    output.loads.values().copied().collect()
}

/// max − min of the loads.
pub fn spread(output: &PlanOutput) -> u64 {
    let l = loads(output);
    l.iter().max().unwrap_or(&0) - l.iter().min().unwrap_or(&0)
}

/// Count-mode lower bound of moves from `previous` to a balanced assignment of
/// `output`'s readable shards over equal-capacity pods `eligible`.
pub fn lower_bound(previous: &BTreeMap<String, Previous>, output: &PlanOutput) -> u64 {
    let s = output
        .assignment
        .values()
        .filter(|a| a.owner.is_some())
        .count() as u64;
    let p = output.loads.len() as u64;
    if p == 0 {
        return 0;
    }
    let mut cur: BTreeMap<&str, u64> = output.loads.keys().map(|k| (k.as_str(), 0)).collect();
    let mut orphans = 0;
    for (id, prev) in previous {
        if output
            .assignment
            .get(id)
            .and_then(|a| a.owner.as_ref())
            .is_none()
        {
            continue;
        }
        match cur.get_mut(prev.owner()) {
            Some(c) => *c += 1,
            None => orphans += 1,
        }
    }
    let floor = s / p;
    let ceil_slots = s % p;
    // Pods above the floor, most loaded first, take the ceiling slots.
    let mut held: Vec<u64> = cur.values().copied().collect();
    held.sort_unstable_by(|a, b| b.cmp(a));
    let excess: u64 = held
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let q = if (i as u64) < ceil_slots {
                floor + 1
            } else {
                floor
            };
            c.saturating_sub(q)
        })
        .sum();
    orphans + excess
}

/// Sets the balance mode.
pub fn with_balance(mut input: PlanInput, balance: Balance) -> PlanInput {
    input.options.balance = balance;
    input
}

/// Sets the rebalance mode.
pub fn with_rebalance(mut input: PlanInput, rebalance: Rebalance) -> PlanInput {
    input.options.rebalance = rebalance;
    input
}
