//! Criterion benchmarks of the assignment engine: a fresh plan and a steady
//! re-plan at 10,000 shards × 1,000 pods and 100,000 × 2,000 (goal: < 50 ms on
//! one core), and the incremental re-plan after one pod joins or leaves.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use shardring::engine::{
    PlanInput, PlanOptions, PlanOutput, Pod, Previous, Shard, ShardState, plan,
};

fn input(shards: usize, pods: usize) -> PlanInput {
    PlanInput {
        options: PlanOptions {
            consumer_name: "orders".to_owned(),
            ..PlanOptions::default()
        },
        shards: (0..shards)
            .map(|i| Shard {
                id: format!("shardId-{i:012}"),
                hash_key_range: None,
                parents: Vec::new(),
                state: ShardState::Open,
            })
            .collect::<Vec<_>>()
            .into(),
        pods: (0..pods).map(|i| pod(&format!("consumer-{i}"))).collect(),
        previous: Default::default(),
        loads: BTreeMap::new(),
        ..PlanInput::default()
    }
}

fn pod(name: &str) -> Pod {
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

fn previous_of(output: &PlanOutput) -> BTreeMap<String, Previous> {
    output
        .assignment
        .iter()
        .filter_map(|(id, a)| Some((id.clone(), Previous::Owner(a.owner.clone()?))))
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (shards, pods) in [(10_000, 1_000), (100_000, 2_000)] {
        let label = format!("{shards}x{pods}");
        let fresh = input(shards, pods);
        group.bench_function(format!("{label}/fresh"), |b| {
            b.iter(|| plan(black_box(&fresh)).unwrap())
        });

        let mut steady = fresh.clone();
        steady.previous = previous_of(&plan(&fresh).unwrap()).into();
        group.bench_function(format!("{label}/steady"), |b| {
            b.iter(|| plan(black_box(&steady)).unwrap())
        });

        let mut joined = steady.clone();
        joined.pods.push(pod("consumer-joined"));
        group.bench_function(format!("{label}/one-pod-joins"), |b| {
            b.iter(|| plan(black_box(&joined)).unwrap())
        });

        let mut left = steady.clone();
        left.pods.remove(pods / 2);
        group.bench_function(format!("{label}/one-pod-leaves"), |b| {
            b.iter(|| plan(black_box(&left)).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
