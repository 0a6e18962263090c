//! The strategies compared, behind one trait: count balance (shardring's
//! count mode: the start every strategy shares, which never moves while the
//! pods stay), shardring's throughput mode (the core's smoothing and
//! damping, the engine's plan, every reading fed to the same estimates the
//! operator keeps), and the KCL 3.x-style reassigner ([`crate::kcl`]).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use shardring::engine::{
    Balance, PlanInput, PlanOptions, Pod, Previous, Rebalance, Shard, ShardState, plan,
};
use shardring_core::load::{
    Estimate, confirmation_wait, damping_wait, engine_load, out_of_band_since, shift_news_after,
};

use crate::world::Loads;

/// A way of assigning shards to pods over time.
pub trait Strategy {
    /// Its name in the tables.
    fn name(&self) -> &'static str;
    /// One step at second `t`: take the readings, maybe move shards.
    fn step(&mut self, t: u64, loads: &Loads);
    /// Shard → pod.
    fn owners(&self) -> &[usize];
    /// A copy, to run on from the same state.
    fn boxed(&self) -> Box<dyn Strategy>;
}

pub fn shard_ids(n: usize) -> Vec<Shard> {
    (0..n)
        .map(|i| Shard {
            id: format!("shardId-{i:012}"),
            hash_key_range: None,
            parents: Vec::new(),
            state: ShardState::Open,
        })
        .collect()
}

pub fn pod_list(p: usize) -> Vec<Pod> {
    (0..p)
        .map(|i| Pod {
            name: format!("consumer-{i:03}"),
            ready: true,
            terminating: false,
            capacity: 1,
            zone: None,
            node: None,
            ready_since: Some(0),
        })
        .collect()
}

/// The count-balanced assignment every strategy starts from.
pub fn count_start(n: usize, p: usize) -> Vec<usize> {
    let input = PlanInput {
        options: PlanOptions {
            consumer_name: "orders".into(),
            ..PlanOptions::default()
        },
        shards: shard_ids(n).into(),
        pods: pod_list(p),
        ..PlanInput::default()
    };
    let out = plan(&input).expect("count plan");
    let index: BTreeMap<String, usize> = input
        .pods
        .iter()
        .enumerate()
        .map(|(i, pod)| (pod.name.clone(), i))
        .collect();
    input
        .shards
        .iter()
        .map(|s| index[out.assignment[&s.id].owner.as_ref().expect("owned")])
        .collect()
}

/// Count balance: what it starts with, it keeps.
#[derive(Clone)]
pub struct Count(pub Vec<usize>);

impl Strategy for Count {
    fn name(&self) -> &'static str {
        "count"
    }
    fn step(&mut self, _t: u64, _loads: &Loads) {}
    fn owners(&self) -> &[usize] {
        &self.0
    }
    fn boxed(&self) -> Box<dyn Strategy> {
        Box::new(self.clone())
    }
}

/// Simulated time zero.
pub fn ts(t: u64) -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid")
        + SignedDuration::from_secs(i64::try_from(t).expect("seconds"))
}

/// shardring's throughput mode: readings smoothed as the operator smooths
/// them, a plan every `plan_every` seconds with the band, the noise margin
/// and the damping of the real plan step.
#[derive(Clone)]
pub struct Throughput {
    input: PlanInput,
    owners: Vec<usize>,
    estimates: Vec<Option<Estimate>>,
    last_rebalance: Option<Timestamp>,
    out_of_band_since: Option<Timestamp>,
    half_life: Duration,
    damping: Duration,
    plan_every: u64,
}

impl Throughput {
    pub fn new(start: Vec<usize>, p: usize) -> Self {
        let n = start.len();
        Self {
            input: PlanInput {
                options: PlanOptions {
                    consumer_name: "orders".into(),
                    balance: Balance::Throughput,
                    band_percent: Some(10),
                    ..PlanOptions::default()
                },
                shards: shard_ids(n).into(),
                pods: pod_list(p),
                ..PlanInput::default()
            },
            owners: start,
            estimates: vec![None; n],
            last_rebalance: None,
            out_of_band_since: None,
            // The defaults of spec.throughput; the operator plans a group
            // balanced by throughput at least every half-life.
            half_life: Duration::from_secs(30),
            damping: Duration::from_secs(300),
            plan_every: 30,
        }
    }
}

impl Strategy for Throughput {
    fn name(&self) -> &'static str {
        "shardring"
    }

    fn step(&mut self, t: u64, loads: &Loads) {
        let now = ts(t);
        for (s, estimate) in self.estimates.iter_mut().enumerate() {
            let bytes = loads.reading(s, t, 1);
            match estimate {
                Some(e) => e.update(bytes, 0.0, now, self.half_life),
                None => *estimate = Some(Estimate::first(bytes, 0.0, now)),
            }
        }
        if !t.is_multiple_of(self.plan_every) {
            return;
        }
        let input = &mut self.input;
        input.previous = input
            .shards
            .iter()
            .zip(&self.owners)
            .map(|(s, &p)| (s.id.clone(), Previous::Owner(input.pods[p].name.clone())))
            .collect::<BTreeMap<_, _>>()
            .into();
        let news_after = shift_news_after(self.last_rebalance, self.damping, self.half_life, now);
        input.loads = input
            .shards
            .iter()
            .zip(&self.estimates)
            .filter_map(|(s, e)| Some((s.id.clone(), engine_load(e.as_ref()?, news_after)?)))
            .collect();
        // The pods never change here: the pod-change time is the start.
        let damped = damping_wait(self.last_rebalance, ts(0), self.damping, now);
        let unconfirmed = confirmation_wait(self.out_of_band_since, self.half_life, now);
        input.options.rebalance = match damped.max(unconfirmed) {
            Some(_) => Rebalance::RequiredOnly,
            None => Rebalance::All,
        };
        let out = plan(input).expect("throughput plan");
        let moved = out.optional_moves() > 0;
        if moved {
            self.last_rebalance = Some(now);
        }
        let outside = out
            .throughput
            .as_ref()
            .is_some_and(|r| r.still_out_of_band > 0);
        self.out_of_band_since = out_of_band_since(self.out_of_band_since, outside, moved, now);
        for (s, shard) in input.shards.iter().enumerate() {
            let owner = out.assignment[&shard.id].owner.as_ref().expect("owned");
            self.owners[s] = input
                .pods
                .iter()
                .position(|p| &p.name == owner)
                .expect("a pod");
        }
    }

    fn owners(&self) -> &[usize] {
        &self.owners
    }

    fn boxed(&self) -> Box<dyn Strategy> {
        Box::new(self.clone())
    }
}
