//! Pool-wide balance against per-group planning, on the same pods and
//! groups in the same run: several count-mode ShardGroups on one pool of
//! pods that became Ready a minute apart (as a rolling deploy leaves them).
//! Per group, each pod's total over the pool (most and fewest, most ÷ fair
//! share); the moves when one pod joins against the lower bound (the new
//! pod's floors plus ⌊its share⌋ of the extras) and when the oldest leaves
//! against the shards it held; moves per shard over a surge rolling deploy
//! (one new pod, then the oldest removed, required moves only until the
//! roll ends, then one rebalance, as the rebalance delay has it).
//!
//!     cargo bench -p shardring --bench pool

use std::collections::BTreeMap;

use shardring_engine::pool::plan_together;
use shardring_engine::{
    PlanInput, PlanOptions, PlanOutput, Pod, Previous, Rebalance, Shard, ShardState, plan,
};

/// Groups × shards each, on pods.
const CASES: [(usize, usize, usize); 6] = [
    (20, 2, 8),
    (10, 4, 3),
    (6, 3, 4),
    (12, 16, 5),
    (50, 20, 200),
    (8, 100, 30),
];

#[derive(Clone, Copy, PartialEq)]
enum Planning {
    Alone,
    Pool,
}

fn pod(name: String, ready_since: i64) -> Pod {
    Pod {
        name,
        ready: true,
        terminating: false,
        capacity: 1,
        zone: None,
        node: None,
        ready_since: Some(ready_since),
    }
}

/// Seconds for the `i`th pod to become Ready, a minute apart.
fn minute(i: usize) -> i64 {
    i64::try_from(i).expect("a pod number") * 60
}

fn fleet(n: usize) -> Vec<Pod> {
    (0..n).map(|i| pod(format!("old-{i}"), minute(i))).collect()
}

struct Pool {
    groups: usize,
    shards: usize,
    outputs: BTreeMap<String, PlanOutput>,
    planning: Planning,
}

impl Pool {
    fn new(groups: usize, shards: usize, planning: Planning) -> Self {
        Self {
            groups,
            shards,
            outputs: BTreeMap::new(),
            planning,
        }
    }

    /// Plans every group on `pods`; the moves made.
    fn plan(&mut self, pods: &[Pod], rebalance: Rebalance) -> u64 {
        let inputs: BTreeMap<String, PlanInput> = (0..self.groups)
            .map(|g| {
                let name = format!("ns/group-{g:03}");
                let previous = self.outputs.get(&name).map_or_else(BTreeMap::new, |out| {
                    out.assignment
                        .iter()
                        .filter_map(|(id, a)| Some((id.clone(), Previous::Owner(a.owner.clone()?))))
                        .collect()
                });
                let input = PlanInput {
                    options: PlanOptions {
                        consumer_name: name.clone(),
                        rebalance,
                        ..PlanOptions::default()
                    },
                    shards: (0..self.shards)
                        .map(|s| Shard {
                            id: format!("{name}-{s}"),
                            hash_key_range: None,
                            parents: Vec::new(),
                            state: ShardState::Open,
                        })
                        .collect::<Vec<_>>()
                        .into(),
                    pods: pods.to_vec(),
                    previous: previous.into(),
                    ..PlanInput::default()
                };
                (name, input)
            })
            .collect();
        let outputs = match self.planning {
            Planning::Pool => plan_together(&inputs).expect("plan"),
            Planning::Alone => inputs
                .iter()
                .map(|(name, input)| (name.clone(), plan(input).expect("plan")))
                .collect(),
        };
        let moves = outputs.values().map(|o| o.moves).sum();
        self.outputs = outputs;
        moves
    }

    fn totals(&self) -> BTreeMap<String, u64> {
        shardring_engine::pool::totals(&self.outputs)
    }
}

struct Figures {
    min: u64,
    max: u64,
    max_over_fair: f64,
    join: u64,
    join_bound: u64,
    leave: u64,
    leave_held: u64,
    rolling: f64,
}

fn measure(groups: usize, shards: usize, pods: usize, planning: Planning) -> Figures {
    let total = (groups * shards) as u64;
    let mut pool = Pool::new(groups, shards, planning);
    let mut live = fleet(pods);
    pool.plan(&live, Rebalance::All);
    let totals = pool.totals();
    let (min, max) = (
        totals.values().copied().min().unwrap_or(0),
        totals.values().copied().max().unwrap_or(0),
    );
    let fair = total as f64 / pods as f64;

    live.push(pod("joined".into(), 1_000_000));
    let join = pool.plan(&live, Rebalance::All);
    let floors = groups as u64 * (shards as u64 / (pods as u64 + 1));
    let extras = groups as u64 * (shards as u64 % (pods as u64 + 1));
    let join_bound = floors + extras / (pods as u64 + 1);
    let leaving = live.remove(0);
    let leave_held = pool.totals().get(&leaving.name).copied().unwrap_or(0);
    let leave = pool.plan(&live, Rebalance::All);

    let mut pool = Pool::new(groups, shards, planning);
    let mut live = fleet(pods);
    pool.plan(&live, Rebalance::All);
    let mut moves = 0;
    for i in 0..pods {
        live.push(pod(format!("new-{i}"), 2_000_000 + minute(i)));
        moves += pool.plan(&live, Rebalance::RequiredOnly);
        live.remove(0);
        moves += pool.plan(&live, Rebalance::RequiredOnly);
    }
    moves += pool.plan(&live, Rebalance::All);
    Figures {
        min,
        max,
        max_over_fair: max as f64 / fair,
        join,
        join_bound,
        leave,
        leave_held,
        rolling: moves as f64 / total as f64,
    }
}

fn main() {
    println!(
        "several count-mode groups on one pool: per-group planning (alone) vs pool-wide (pool)"
    );
    println!(
        "{:<18} {:<6} {:>9} {:>11} {:>14} {:>14} {:>14}",
        "groups x shards/pods",
        "",
        "min/max",
        "max/fair",
        "join (bound)",
        "leave (held)",
        "rolling/shard"
    );
    for (groups, shards, pods) in CASES {
        for planning in [Planning::Alone, Planning::Pool] {
            let f = measure(groups, shards, pods, planning);
            let label = match planning {
                Planning::Alone => "alone",
                Planning::Pool => "pool",
            };
            println!(
                "{:<18} {:<6} {:>9} {:>11.2} {:>14} {:>14} {:>14.2}",
                format!("{groups} x {shards} / {pods}"),
                label,
                format!("{}/{}", f.min, f.max),
                f.max_over_fair,
                format!("{} ({})", f.join, f.join_bound),
                format!("{} ({})", f.leave, f.leave_held),
                f.rolling
            );
        }
    }
}
