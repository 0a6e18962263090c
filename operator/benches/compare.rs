//! Side-by-side comparison of shardring's engine with the two common
//! approaches, implemented here only as baselines:
//!
//! * hash-mod: each shard on the sorted pod list at
//!   `index = floor(P · hash(consumer, shard) / 2^64)`;
//! * ordinal: contiguous ranges of the sorted shard list over the sorted pod
//!   list, ⌊S/P⌋ each, the remainder to the last pod.
//!
//! Prints max load / fair share, moves versus the lower bound when one pod
//! joins or leaves, and moves per shard over a rolling deploy (for every old
//! pod: surge one new pod next to the old ones, then terminate the old one;
//! shardring plans `requiredOnly` during the roll and `all` once at the end).
//! Run: `cargo bench -p shardring --bench compare`.

use std::collections::BTreeMap;

use shardring::engine::hash::{mix, shard_hash};
use shardring::engine::{
    PlanInput, PlanOptions, Pod, Previous, Rebalance, Shard, ShardState, plan,
};

const CONSUMER: &str = "orders";

type Owners = BTreeMap<String, String>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Shardring,
    HashMod,
    Ordinal,
}

const METHODS: [Method; 3] = [Method::Shardring, Method::HashMod, Method::Ordinal];

fn shard_ids(s: usize) -> Vec<String> {
    (0..s).map(|i| format!("shardId-{i:012}")).collect()
}

/// Assigns `shards` over `pods` (eligible, in the order they became ready:
/// shardring gets that order as each pod's `readySince`, as the controller
/// passes it from the Ready condition) from `previous`.
fn assign(
    method: Method,
    shards: &[String],
    pods: &[String],
    previous: &Owners,
    rebalance: Rebalance,
) -> Owners {
    let mut sorted = pods.to_vec();
    sorted.sort();
    let p = sorted.len();
    match method {
        Method::Shardring => {
            let input = PlanInput {
                options: PlanOptions {
                    consumer_name: CONSUMER.to_owned(),
                    rebalance,
                    ..PlanOptions::default()
                },
                shards: shards
                    .iter()
                    .map(|id| Shard {
                        id: id.clone(),
                        hash_key_range: None,
                        parents: Vec::new(),
                        state: ShardState::Open,
                    })
                    .collect::<Vec<_>>()
                    .into(),
                pods: pods
                    .iter()
                    .enumerate()
                    .map(|(since, name)| Pod {
                        name: name.clone(),
                        ready: true,
                        terminating: false,
                        capacity: 1,
                        zone: None,
                        node: None,
                        ready_since: Some(i64::try_from(since).expect("a pod number")),
                    })
                    .collect(),
                previous: previous
                    .iter()
                    .map(|(k, v)| (k.clone(), Previous::Owner(v.clone())))
                    .collect::<BTreeMap<_, _>>()
                    .into(),
                loads: BTreeMap::new(),
                ..PlanInput::default()
            };
            plan(&input)
                .expect("plan")
                .assignment
                .iter()
                .filter_map(|(id, a)| Some((id.clone(), a.owner.clone()?)))
                .collect()
        }
        Method::HashMod => shards
            .iter()
            .map(|id| {
                let h = shard_hash(CONSUMER, id);
                let index = usize::try_from((p as u128 * u128::from(h)) >> 64).expect("below p");
                (id.clone(), sorted[index].clone())
            })
            .collect(),
        Method::Ordinal => {
            let mut ids = shards.to_vec();
            ids.sort();
            let per = ids.len() / p;
            ids.into_iter()
                .enumerate()
                .map(|(i, id)| {
                    (
                        id,
                        // Fewer shards than pods: everything on the last pod.
                        sorted[i.checked_div(per).map_or(p - 1, |k| k.min(p - 1))].clone(),
                    )
                })
                .collect()
        }
    }
}

fn moves(before: &Owners, after: &Owners) -> usize {
    after
        .iter()
        .filter(|(id, o)| before.get(*id).is_some_and(|b| b != *o))
        .count()
}

/// Fewest moves that reach a ⌊S/P⌋/⌈S/P⌉ balance over `pods` from `before`.
fn lower_bound(before: &Owners, pods: &[String]) -> usize {
    let s = before.len();
    let p = pods.len();
    let mut held: BTreeMap<&str, usize> = pods.iter().map(|n| (n.as_str(), 0)).collect();
    let mut orphans = 0;
    for owner in before.values() {
        match held.get_mut(owner.as_str()) {
            Some(c) => *c += 1,
            None => orphans += 1,
        }
    }
    let mut counts: Vec<usize> = held.into_values().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let excess: usize = counts
        .iter()
        .enumerate()
        .map(|(i, &c)| c.saturating_sub(s / p + usize::from(i < s % p)))
        .sum();
    orphans + excess
}

fn max_over_fair(owners: &Owners, p: usize) -> f64 {
    let mut loads: BTreeMap<&str, usize> = BTreeMap::new();
    for o in owners.values() {
        *loads.entry(o).or_default() += 1;
    }
    let max = loads.values().max().copied().unwrap_or(0);
    max as f64 / (owners.len() as f64 / p as f64)
}

/// Deployment-style pod names: a generation and a hash suffix.
fn pod_name(generation: u64, i: usize) -> String {
    format!("consumer-{:010x}", mix(generation << 32 | i as u64) >> 24)
}

fn rolling_deploy(method: Method, s: usize, p: usize) -> f64 {
    let shards = shard_ids(s);
    let mut pods: Vec<String> = (0..p).map(|i| pod_name(1, i)).collect();
    let mut owners = assign(method, &shards, &pods, &Owners::new(), Rebalance::All);
    let mut total = 0;
    for i in 0..p {
        // Surge: the new pod becomes ready next to the old ones...
        pods.push(pod_name(2, i));
        let next = assign(method, &shards, &pods, &owners, Rebalance::RequiredOnly);
        total += moves(&owners, &next);
        owners = next;
        // ...then the old one terminates.
        pods.remove(0);
        let next = assign(method, &shards, &pods, &owners, Rebalance::RequiredOnly);
        total += moves(&owners, &next);
        owners = next;
    }
    let last = assign(method, &shards, &pods, &owners, Rebalance::All);
    total += moves(&owners, &last);
    total as f64 / s as f64
}

fn main() {
    // `cargo bench` passes flags such as `--bench`; this binary takes none.
    let name = |m: Method| match m {
        Method::Shardring => "shardring",
        Method::HashMod => "hash-mod",
        Method::Ordinal => "ordinal",
    };
    println!("max load / fair share (1.00 is perfect)");
    println!(
        "{:<16} {:>10} {:>10} {:>10}",
        "shards x pods",
        name(METHODS[0]),
        name(METHODS[1]),
        name(METHODS[2])
    );
    for (s, p) in [
        (10, 10),
        (10, 4),
        (64, 32),
        (256, 41),
        (1000, 64),
        (4096, 64),
    ] {
        let shards = shard_ids(s);
        let pods: Vec<String> = (0..p).map(|i| format!("consumer-{i}")).collect();
        let cells: Vec<String> = METHODS
            .iter()
            .map(|&m| {
                format!(
                    "{:.2}",
                    max_over_fair(
                        &assign(m, &shards, &pods, &Owners::new(), Rebalance::All),
                        p
                    )
                )
            })
            .collect();
        println!(
            "{:<16} {:>10} {:>10} {:>10}",
            format!("{s} x {p}"),
            cells[0],
            cells[1],
            cells[2]
        );
    }

    println!("\nshards moved when one pod joins / leaves (lower bound: from a balanced start)");
    println!(
        "{:<16} {:>6} {:>11} {:>10} {:>10} {:>10}",
        "shards x pods",
        "change",
        "lower bound",
        name(METHODS[0]),
        name(METHODS[1]),
        name(METHODS[2])
    );
    for (s, p) in [(10, 4), (100, 10), (256, 41), (1000, 50), (4096, 64)] {
        let shards = shard_ids(s);
        let pods: Vec<String> = (0..p).map(|i| format!("consumer-{i}")).collect();
        let joined: Vec<String> = (0..=p).map(|i| format!("consumer-{i}")).collect();
        let left: Vec<String> = (0..p - 1).map(|i| format!("consumer-{i}")).collect();
        for (label, after) in [("+1", &joined), ("-1", &left)] {
            let mut bound = 0;
            let cells: Vec<String> = METHODS
                .iter()
                .map(|&m| {
                    let before = assign(m, &shards, &pods, &Owners::new(), Rebalance::All);
                    if m == Method::Shardring {
                        bound = lower_bound(&before, after);
                    }
                    let next = assign(m, &shards, after, &before, Rebalance::All);
                    moves(&before, &next).to_string()
                })
                .collect();
            println!(
                "{:<16} {:>6} {:>11} {:>10} {:>10} {:>10}",
                format!("{s} x {p}"),
                label,
                bound,
                cells[0],
                cells[1],
                cells[2]
            );
        }
    }

    println!("\nmoves per shard over a rolling deploy (surge 1 new pod, then terminate 1 old pod)");
    println!(
        "{:<16} {:>10} {:>10} {:>10}",
        "shards x pods",
        name(METHODS[0]),
        name(METHODS[1]),
        name(METHODS[2])
    );
    for (s, p) in [(6, 5), (100, 7), (100, 10), (1000, 50)] {
        let cells: Vec<String> = METHODS
            .iter()
            .map(|&m| format!("{:.2}", rolling_deploy(m, s, p)))
            .collect();
        println!(
            "{:<16} {:>10} {:>10} {:>10}",
            format!("{s} x {p}"),
            cells[0],
            cells[1],
            cells[2]
        );
    }
}
