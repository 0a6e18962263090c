//! Churn on a pool of many groups (`--pool GROUPSxSHARDSxPODS`, default
//! 50x20x200): one ConsumerPool, GROUPS static ShardGroups of SHARDS
//! partitions, PODS Ready pods. A pod that turns Ready (or is deleted)
//! changes the documents of many groups at once; what counts is the time
//! from the pod write until every document it changed is delivered, with
//! its baseline in the same run:
//!
//! * the floor: a client that does no work makes the same pod write, then
//!   PUTs as many ConfigMaps, of the same sizes, as the operator's event
//!   changed, as many at a time as the operator reconciles groups
//!   (`--concurrency`, 8), and waits for the watch to deliver the last.
//!
//! Events alternate between the operator's pods (`app=consumer`) and the
//! floor's (`app=floor`, selected by no pool), each after the namespace
//! was quiet and every group settled. Also counted: the operator's write
//! requests per event and at steady state.
//!
//! `SHARDRING_BENCH_EVENTS=<file>` appends one line per event there, as the
//! single-group churn does (its number, join or leave, the wall-clock time
//! of its pod write, the operator's and the floor's latency in ms).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
use shardring_devkit::fixtures;

use crate::churn::{EventLog, percentiles, wall_clock_of};
use crate::operator::Operator;
use crate::populate::{self, pod_event};
use crate::server::Server;
use crate::timeline::{State, Timeline};

/// Joins and leaves per run.
const EVENTS: usize = 40;
/// How long nothing may change before the next event.
const QUIET: Duration = Duration::from_millis(300);
/// The longest wait for the pool to settle.
const SETTLE: Duration = Duration::from_secs(60);
/// How long nothing may change before the steady state is watched: longer
/// than the operator's hold of bookkeeping-only status writes (1 s).
const REST_QUIET: Duration = Duration::from_secs(2);
/// How long the steady state is watched for writes.
const STEADY: Duration = Duration::from_secs(20);
/// Groups the operator reconciles at once (`shardring run`'s default).
const CONCURRENCY: usize = 8;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct PoolRow {
    /// Groups, shards and pods.
    pub size: String,
    /// Documents an event changed, on average.
    pub documents_per_event: f64,
    /// The floor's event → its last ConfigMap delivered, p50 and p99.
    pub floor: (Duration, Duration),
    /// The operator's event → every changed document delivered, p50 and p99.
    pub operator: (Duration, Duration),
    /// Events after which no document changed within [`SETTLE`].
    pub missed: usize,
    /// Write requests the operator counted per event.
    pub writes_per_event: f64,
    /// At steady state: the operator's write requests, the watches' changes.
    pub steady: (u64, u64),
}

/// One run of `groups` × `shards` on `pods`.
pub async fn run(
    server: &Server,
    (groups, shards, pods): (usize, u32, usize),
    run: usize,
    extra: &[String],
) -> PoolRow {
    populate::remove_namespaces(server, "poolchurn").await;
    let client = &server.client;
    let ns = format!("pool-{groups}x{shards}x{pods}-{run}");
    populate::create(client, &populate::namespace(&ns, "poolchurn")).await;
    populate::create(client, &fixtures::pool(&ns, "p", "consumer")).await;
    let names: Vec<String> = (0..pods).map(|i| format!("c-{i}")).collect();
    populate::ready_pods(server, &ns, &names, "consumer").await;
    let timeline = Timeline::namespace(client, &ns, &[]).await;
    let operator = Operator::spawn(&server.kubeconfig, Some(&ns), &ns, extra);
    operator.ready(Duration::from_secs(120)).await;
    let group_names: Vec<String> = (0..groups).map(|g| format!("g-{g:02}")).collect();
    let objects = group_names
        .iter()
        .map(|g| fixtures::static_group(&ns, g, "p", shards))
        .collect();
    populate::create_all(client, objects).await;
    settle(&timeline, &ns, &group_names).await;

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let (mut ours, mut theirs, mut documents, mut writes) = (Vec::new(), Vec::new(), 0, 0);
    let mut missed = 0;
    let mut event_log = EventLog::from_env();
    for k in 0..EVENTS {
        let join = k % 2 == 0;
        let before = operator.writes();
        let t0 = pod_event(
            client,
            &pods_api,
            &ns,
            "j",
            k,
            join,
            "consumer",
            async || {
                settle(&timeline, &ns, &group_names).await;
            },
        )
        .await;
        let wall = wall_clock_of(t0);
        // The first document the event changed, then the pool settled.
        let reacted = timeline
            .wait(SETTLE, |state| {
                (!first_changes(state, &group_names, t0).is_empty()).then_some(())
            })
            .await;
        settle(&timeline, &ns, &group_names).await;
        writes += operator.writes().saturating_sub(before);
        let changed = first_changes(&timeline.lock(), &group_names, t0);
        let latency = match changed.values().max() {
            Some(&last) if reacted.is_some() => {
                ours.push(last - t0);
                documents += changed.len();
                Some(last - t0)
            }
            _ => {
                missed += 1;
                None
            }
        };
        let sizes: Vec<(BTreeMap<String, String>, Option<_>)> = {
            let state = timeline.lock();
            changed
                .keys()
                .filter_map(|name| state.latest.get(name))
                .map(|cm| (cm.data.clone().unwrap_or_default(), cm.binary_data.clone()))
                .collect()
        };
        let t0 = pod_event(client, &pods_api, &ns, "f", k, join, "floor", async || {
            settle(&timeline, &ns, &group_names).await;
        })
        .await;
        if sizes.is_empty() {
            continue;
        }
        let versions: Vec<(String, String)> = futures::stream::iter(sizes.into_iter().enumerate())
            .map(|(i, (mut data, binary_data))| {
                let maps = maps.clone();
                async move {
                    let name = format!("floor-{i}");
                    data.insert("event".into(), k.to_string());
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            ..Default::default()
                        },
                        data: Some(data),
                        binary_data,
                        ..Default::default()
                    };
                    let written =
                        match maps.get_opt(&name).await.expect("read a floor ConfigMap") {
                            None => maps.create(&PostParams::default(), &cm).await,
                            Some(_) => maps.replace(&name, &PostParams::default(), &cm).await,
                        }
                        .expect("the floor's ConfigMap write");
                    (name, written.metadata.resource_version.unwrap_or_default())
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut last = t0;
        for (name, version) in versions {
            let at = timeline
                .config_map_at(&name, &version, SETTLE)
                .await
                .expect("the floor's ConfigMap delivered");
            last = last.max(at);
        }
        theirs.push(last - t0);
        event_log.write(k, join, wall, latency, last - t0);
    }
    settle(&timeline, &ns, &group_names).await;
    // At rest means after the last event's writes: a group's status write
    // of bookkeeping only may wait up to a second after its document (the
    // operator's status hold), longer than the settle's quiet.
    quiet_for(&timeline, REST_QUIET).await;
    let (writes_before, changes_before) = (operator.writes(), timeline.lock().changes);
    tokio::time::sleep(STEADY).await;
    let steady = (
        operator.writes().saturating_sub(writes_before),
        timeline.lock().changes - changes_before,
    );
    drop(operator);
    let events = ours.len().max(1) as f64;
    PoolRow {
        size: format!("{groups} groups x {shards} shards, {pods} pods"),
        documents_per_event: documents as f64 / events,
        floor: percentiles(theirs),
        operator: percentiles(ours),
        missed,
        writes_per_event: writes as f64 / EVENTS as f64,
        steady,
    }
}

/// The first change at or after `t0` of each group's document that changed.
fn first_changes(state: &State, groups: &[String], t0: Instant) -> BTreeMap<String, Instant> {
    groups
        .iter()
        .filter_map(|g| {
            let name = format!("{g}-assignment");
            let at = state
                .config_maps
                .get(&name)?
                .iter()
                .find(|(at, _)| *at >= t0)?
                .0;
            Some((name, at))
        })
        .collect()
}

/// Waits until nothing in the namespace changed for `quiet` (a minute at
/// most).
async fn quiet_for(timeline: &Timeline, quiet: Duration) {
    let quiet_long_enough = |state: &State| {
        state
            .last_change
            .is_none_or(|at| at.elapsed() >= quiet)
            .then_some(())
    };
    if timeline
        .wait(Duration::from_secs(60), quiet_long_enough)
        .await
        .is_none()
    {
        eprintln!(
            "bench: the namespace did not stay quiet for {quiet:?} within a minute; going on"
        );
    }
}

/// Waits until the namespace was quiet for [`QUIET`] and every group's
/// status has caught up with its document with no move in flight.
async fn settle(timeline: &Timeline, ns: &str, groups: &[String]) {
    let started = Instant::now();
    loop {
        let done = {
            let state = timeline.lock();
            let quiet = state.last_change.is_none_or(|at| at.elapsed() >= QUIET);
            quiet
                && groups.iter().all(|g| {
                    let seen = state.groups.get(&(ns.to_owned(), g.clone()));
                    let document = state.latest.get(&format!("{g}-assignment"));
                    match (seen, document) {
                        (Some(seen), Some(cm)) => {
                            let epoch = shardring_core::codec::decode(cm).map_or(0, |d| d.epoch);
                            seen.moves_in_flight == 0 && seen.epoch == epoch
                        }
                        _ => false,
                    }
                })
        };
        if done {
            return;
        }
        if started.elapsed() > SETTLE {
            eprintln!("bench: the pool did not settle within {SETTLE:?}; going on");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
