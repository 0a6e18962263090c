//! The plan step alone at scale: one ShardGroup of 20,000 static shards over
//! 5,000 Ready pods, planned from an [`Observation`] built in memory (no
//! stores, no API server). Prints the median and worst time of a no-op plan
//! (everything published and every annotation current), of a pod leaving
//! (its shards start a revoke) and of a pod joining (balancing moves start),
//! with the engine run alone on the same input as the baseline measured in
//! the same run: what the plan costs above the assignment itself (and the
//! engine alone again with the group's memory kept, what it costs when
//! nothing changed).
//!
//!     cargo bench -p shardring-core --bench plan [-- --pods N --shards M --rounds R]
//!
//! The leave and join are timed three ways: with a memory that planned
//! the observation before the event; with the memory of the plan that
//! published the document (its encode cache warm); and with that memory
//! after the cycle prepared the published document for the next plan
//! (`PlanMemory::prepare`), the operator's path.
//!
//! `--only no-op|leave|join` times that one case alone, on the operator's
//! path, `rounds` times (to profile it: nothing else is planned in between,
//! see `main`). Last, the encoding alone of the document a pod's joining
//! publishes: with no cache, with the cache of the document before it
//! (as the group's memory holds it), and gzip over the whole JSON in one
//! stream (as documents were compressed before chunks), with the sizes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use shardring_core::codec::{self, EncodeCache};
use shardring_core::fixtures::apply;
use shardring_core::{
    Observation, PlanMemory, PodInfo, Published, Topology, TopologyObservation, plan, plan_with,
};
use shardring_crds::{ShardGroup, fixtures};

const NS: &str = "bench";

/// The operator's allocator, with its settings (`.cargo/config.toml`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn group(shards: u32) -> ShardGroup {
    let mut group = fixtures::static_group(NS, "orders", "consumers", shards, "orders-{index}");
    group.metadata.uid = Some("bench-uid".into());
    // Balancing moves start at once (the default waits 30 s).
    group.spec.rebalance = fixtures::rebalance("0s");
    group
}

fn pod(name: &str) -> PodInfo {
    PodInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([("app".into(), "consumer".into())]),
        selected: true,
        ready: true,
        ready_since: Some(Timestamp::UNIX_EPOCH),
        node_name: Some("node-1".into()),
        created: Some(Timestamp::UNIX_EPOCH),
        ..Default::default()
    }
}

/// Times `plan_with(obs)` `rounds` times, as the operator runs it: each
/// time with the group's memory after a plan of `before` (the observation
/// before the event), and without freeing what the plan is done with (the
/// operator frees it once the document is on its way): (median, max).
fn time(obs: &Observation, before: &Observation, rounds: usize) -> (Duration, Duration) {
    time_from(obs, before, rounds, &PlanMemory::default())
}

/// [`time`], the group's memory being `memory` before the plan of
/// `before` (a memory that encoded `before`'s document: warm encode cache).
fn time_from(
    obs: &Observation,
    before: &Observation,
    rounds: usize,
    memory: &PlanMemory,
) -> (Duration, Duration) {
    let times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let mut memory = memory.clone();
            drop(plan_with(before, &mut memory));
            let start = Instant::now();
            let planned = std::hint::black_box(plan_with(std::hint::black_box(obs), &mut memory));
            let took = start.elapsed();
            drop(planned);
            took
        })
        .collect();
    median_and_max(times)
}

/// The median and the largest of `times`.
fn median_and_max(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    (times[times.len() / 2], times[times.len() - 1])
}

/// Times `plan(obs)` `rounds` times: no memory of earlier plans, and what
/// the plan is done with freed inside it (the plan as it ran before the
/// operator kept a memory per group): (median, max).
fn time_without_memory(obs: &Observation, rounds: usize) -> (Duration, Duration) {
    let times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(plan(std::hint::black_box(obs)));
            start.elapsed()
        })
        .collect();
    median_and_max(times)
}

/// `obs` with its first pod terminating: its shards start a revoke.
fn left(mut obs: Observation) -> Observation {
    obs.pods[0].deletion_timestamp = Some(obs.now);
    obs
}

/// `obs` with one more Ready pod: balancing moves start. In name order
/// (after `p-00000`), as the operator observes pods.
fn joined(mut obs: Observation) -> Observation {
    obs.pods.insert(1, pod("p-00000-new"));
    obs
}

/// The case named by `--only`, if any.
fn only() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--only")?;
    Some(args.get(at + 1).expect("--only takes a case").clone())
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let pods = arg("--pods", 5_000);
    let shards = u32::try_from(arg("--shards", 20_000)).expect("--shards fits in a u32");
    let rounds = arg("--rounds", 15);
    let group = group(shards);
    let partitions = group.spec.source.named_partitions().unwrap();
    let mut obs = Observation {
        group,
        pool: Some(fixtures::pool(NS, "consumers", &[], 0)),
        // In name order, as the operator observes pods (`collect_pods`).
        pods: (0..pods).map(|i| pod(&format!("p-{i:05}"))).collect(),
        topology: TopologyObservation {
            source: "static".into(),
            last_good: Some(std::sync::Arc::new(Topology::of_partitions(partitions))),
            read_at: Some(Timestamp::UNIX_EPOCH),
            ..Default::default()
        },
        published: Published::Missing,
        leases: Default::default(),
        departed: Default::default(),
        releases: Default::default(),
        loads: Default::default(),
        now: Timestamp::from_second(1_000_000).unwrap(),
        pool_share: Default::default(),
        stateful_sets: Default::default(),
    };
    let (first, _) = time_without_memory(&obs, 3);
    // The memory of the plan that published the document: its encode cache
    // holds that document's chunks, and the document published is that
    // plan's own (as the operator's cache keeps it).
    let mut published_memory = PlanMemory::default();
    let (decision, _) = plan_with(&obs, &mut published_memory);
    obs = apply(obs, decision);
    // And what the operator's cycle prepares once the document is out.
    let mut prepared_memory = published_memory.clone();
    prepared_memory.prepare(obs.published.shared_document().expect("published"));
    if let Some(case) = only() {
        // For a profiler: one case alone, `rounds` times, each on a copy of
        // the memory after the plan of the state before the event (made
        // once), so that a profile holds the plans of the case and not the
        // untimed plans [`time`] makes before each (its CPU caches are
        // colder for it: these times read higher than the table's).
        let event = match case.as_str() {
            "no-op" => obs.clone(),
            "leave" => left(obs.clone()),
            "join" => joined(obs.clone()),
            other => panic!("--only takes no-op, leave or join, not {other:?}"),
        };
        let mut warm = prepared_memory.clone();
        drop(plan_with(&obs, &mut warm));
        let times = (0..rounds)
            .map(|_| {
                let mut memory = warm.clone();
                let start = Instant::now();
                let planned = std::hint::black_box(plan_with(&event, &mut memory));
                let took = start.elapsed();
                drop(planned);
                took
            })
            .collect();
        let (median, max) = median_and_max(times);
        println!("{case} plan: {} median, {} max", ms(median), ms(max));
        return;
    }
    let noop = time(&obs, &obs, rounds);

    // The engine alone on what the no-op plan feeds it: the baseline.
    let input = shardring_engine::PlanInput {
        options: shardring_engine::PlanOptions {
            consumer_name: obs.group.consumer_name(),
            ..Default::default()
        },
        shards: obs.topology.last_good.as_ref().unwrap().shards.clone(),
        pods: obs
            .pods
            .iter()
            .map(|p| shardring_engine::Pod {
                name: p.name.clone(),
                ready: true,
                terminating: false,
                capacity: 1,
                zone: None,
                node: p.node_name.clone(),
                ready_since: p.ready_since.map(|t| t.as_second()),
            })
            .collect(),
        previous: obs
            .published
            .document()
            .unwrap()
            .shards
            .iter()
            .map(|(id, r)| {
                let owner = r.owner.clone().unwrap();
                (id.clone(), shardring_engine::Previous::Owner(owner))
            })
            .collect::<BTreeMap<_, _>>()
            .into(),
        ..Default::default()
    };
    let engine_times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(shardring_engine::plan(&input).unwrap());
            start.elapsed()
        })
        .collect();
    let engine = median_and_max(engine_times);
    // The engine again, with the memory the operator keeps for the group
    // (after one plan of the same input): what a plan costs the engine
    // when nothing changed.
    let mut memory = shardring_engine::EngineMemory::default();
    drop(shardring_engine::plan_with(&input, &mut memory));
    let engine_kept_times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(shardring_engine::plan_with(&input, &mut memory).unwrap());
            start.elapsed()
        })
        .collect();
    let engine_kept = median_and_max(engine_kept_times);

    let leave_times = time(&left(obs.clone()), &obs, rounds);
    let join_times = time(&joined(obs.clone()), &obs, rounds);
    let leave_warm = time_from(&left(obs.clone()), &obs, rounds, &published_memory);
    let join_warm = time_from(&joined(obs.clone()), &obs, rounds, &published_memory);
    let leave_prepared = time_from(&left(obs.clone()), &obs, rounds, &prepared_memory);
    let join_prepared = time_from(&joined(obs.clone()), &obs, rounds, &prepared_memory);
    let encoding = encode_alone(&obs, rounds);
    let leave_plain = time_without_memory(&left(obs.clone()), rounds);
    let join_plain = time_without_memory(&joined(obs), rounds);

    println!("plan step: {pods} pods, {shards} static shards, {rounds} rounds");
    println!("{:<40} {:>10} {:>10}", "step", "median", "max");
    for (step, (median, max)) in [
        ("baseline: engine alone (no-op input)", engine),
        ("engine alone, its memory kept", engine_kept),
        ("first plan (nothing published)", (first, first)),
        ("no-op plan", noop),
        ("pod leaves (revokes start)", leave_times),
        ("pod joins (balancing moves)", join_times),
        ("pod leaves, encode cache warm", leave_warm),
        ("pod joins, encode cache warm", join_warm),
        ("pod leaves, memory prepared", leave_prepared),
        ("pod joins, memory prepared", join_prepared),
        ("pod leaves, no memory, freed inside", leave_plain),
        ("pod joins, no memory, freed inside", join_plain),
    ] {
        println!("{step:<40} {:>10} {:>10}", ms(median), ms(max));
    }
    println!(
        "no-op plan / engine alone: {:.2}x",
        noop.0.as_secs_f64() / engine.0.as_secs_f64()
    );
    println!("encoding alone of a join's document");
    for (step, (median, max), bytes) in encoding {
        println!("{step:<40} {:>10} {:>10} {bytes:>9} B", ms(median), ms(max));
    }
}

/// Times the encoding of the document a pod's joining publishes: each row
/// (median, max) and the bytes it stores.
fn encode_alone(
    obs: &Observation,
    rounds: usize,
) -> Vec<(&'static str, (Duration, Duration), usize)> {
    let before = obs.published.document().expect("published").clone();
    let after = plan(&joined(obs.clone()))
        .document_write
        .expect("a join publishes")
        .document;
    let mut warm = EncodeCache::default();
    codec::encode_with(&before, &mut warm).expect("fits");
    let mut bytes = (0, 0, 0);
    let cold = median_and_max(
        (0..rounds)
            .map(|_| {
                let start = Instant::now();
                let encoded = codec::encode(std::hint::black_box(&after)).expect("fits");
                let took = start.elapsed();
                bytes.0 = encoded.encoded_bytes();
                took
            })
            .collect(),
    );
    let warm = median_and_max(
        (0..rounds)
            .map(|_| {
                let mut cache = warm.clone();
                let start = Instant::now();
                let encoded = codec::encode_with(std::hint::black_box(&after), &mut cache);
                let took = start.elapsed();
                bytes.1 = encoded.expect("fits").encoded_bytes();
                took
            })
            .collect(),
    );
    let one_stream = median_and_max(
        (0..rounds)
            .map(|_| {
                let start = Instant::now();
                let mut gzip = std::io::BufWriter::with_capacity(
                    64 * 1024,
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(2)),
                );
                serde_json::to_writer(&mut gzip, std::hint::black_box(&after)).unwrap();
                let gzip = gzip.into_inner().ok().unwrap().finish().unwrap();
                let took = start.elapsed();
                bytes.2 = gzip.len() + shardring_crds::assignment::CONFIGMAP_GZIP_KEY.len();
                took
            })
            .collect(),
    );
    vec![
        ("encode, no cache", cold, bytes.0),
        ("encode, cache of the document before", warm, bytes.1),
        ("one gzip stream, level 2 (as before)", one_stream, bytes.2),
    ]
}
