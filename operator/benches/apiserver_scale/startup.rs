//! Start-up with many groups: `groups` namespaces, each with a pool of
//! `pods` Ready pods and a static group of `shards`, all created before the
//! operator starts; the time from spawning `shardring run` until the watch
//! delivers every group Ready (reason Published) with all its pods
//! eligible, and the operator's peak RSS then.
//!
//! The baseline, in the same run once the operator is stopped: a plain
//! client making the writes that start-up needs at the least — one
//! annotation per pod, and per group its finalizer, its document and its
//! status — as merge patches of the pods, [`PLAIN_CONCURRENCY`] at a time.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use shardring_devkit::fixtures;

use crate::operator::Operator;
use crate::populate;
use crate::server::Server;
use crate::timeline::Timeline;

/// The plain client's writes in flight: the operator's default
/// `--write-concurrency`.
const PLAIN_CONCURRENCY: usize = shardring::controller::apply::DEFAULT_WRITE_CONCURRENCY;
/// The longest start-up waited for.
const DEADLINE: Duration = Duration::from_secs(900);

/// What one start-up run measured.
#[derive(Debug, Clone)]
pub struct StartupRow {
    /// Groups, pods per group, shards per group.
    pub size: (usize, usize, u32),
    /// Spawn → every group Ready.
    pub ready: Duration,
    /// The plain client's time for the writes start-up needs.
    pub plain: Duration,
    /// Those writes.
    pub writes_needed: usize,
    /// Write requests the operator counted until every group was Ready.
    pub operator_writes: u64,
    /// Peak RSS when every group was Ready, MiB.
    pub rss: f64,
    /// Start-up as a multiple of the plain client's time.
    pub ratio: f64,
}

/// One start-up run; `extra` goes to `shardring run`.
pub async fn run(
    server: &Server,
    groups: usize,
    pods: usize,
    shards: u32,
    extra: &[String],
) -> StartupRow {
    populate::remove_namespaces(server, "churn").await;
    populate::remove_namespaces(server, "startup").await;
    let setup = Instant::now();
    let namespaces: Vec<String> = (0..groups).map(|i| format!("startup-{i}")).collect();
    populate(server, &namespaces, pods, shards).await;
    eprintln!(
        "bench: {groups} groups x {pods} Ready pods in {:.1} s",
        setup.elapsed().as_secs_f64()
    );
    let timeline = Timeline::all_groups(&server.client).await;

    let started = Instant::now();
    let operator = Operator::spawn(&server.kubeconfig, None, &namespaces[0], extra);
    let all_ready = timeline
        .wait(DEADLINE, |s| {
            let ready = s
                .groups
                .values()
                .filter(|g| g.published && g.eligible == pods as u64)
                .count();
            (ready >= groups).then(|| s.groups.values().filter_map(|g| g.at).max())
        })
        .await
        .flatten()
        .unwrap_or_else(|| panic!("not every group Ready after {DEADLINE:?}"));
    let rss = operator.peak_rss_mib();
    let operator_writes = operator.writes();
    drop(operator);
    drop(timeline);

    let writes_needed = groups * (pods + 3);
    let plain = plain_client(&server.client, &namespaces, pods, writes_needed).await;
    StartupRow {
        size: (groups, pods, shards),
        ready: all_ready - started,
        plain,
        ratio: (all_ready - started).as_secs_f64() / plain.as_secs_f64(),
        writes_needed,
        operator_writes,
        rss,
    }
}

/// Every namespace with its pool, group and Ready pods.
async fn populate(server: &Server, namespaces: &[String], pods: usize, shards: u32) {
    let spaces = namespaces
        .iter()
        .map(|ns| populate::namespace(ns, "startup"));
    create(server, spaces.collect()).await;
    let groups = namespaces.iter().flat_map(|ns| {
        [
            fixtures::pool(ns, "p", "consumer"),
            fixtures::static_group(ns, "g", "p", shards),
        ]
    });
    create(server, groups.collect()).await;
    let names: Vec<String> = (0..pods).map(|j| format!("c-{j}")).collect();
    futures::stream::iter(namespaces)
        .for_each_concurrent(4, |ns| {
            let names = &names;
            async move { populate::ready_pods(server, ns, names, "consumer").await }
        })
        .await;
}

async fn create(server: &Server, objects: Vec<Value>) {
    match &server.mock {
        Some(mock) => {
            mock.create_many(objects);
        }
        None => populate::create_all(&server.client, objects).await,
    }
}

/// `writes` merge patches of the pods `c-<j>` of `namespaces`, round robin,
/// [`PLAIN_CONCURRENCY`] at a time: the time until the last was answered.
async fn plain_client(
    client: &kube::Client,
    namespaces: &[String],
    pods: usize,
    writes: usize,
) -> Duration {
    let patch = json!({"metadata": {"annotations": {"bench.shardring.io/plain": "{\"epoch\":1,\"active\":[\"g-0\"]}"}}});
    let started = Instant::now();
    futures::stream::iter(0..writes)
        .for_each_concurrent(PLAIN_CONCURRENCY, |i| {
            let api: Api<Pod> = Api::namespaced(client.clone(), &namespaces[i % namespaces.len()]);
            let name = format!("c-{}", (i / namespaces.len()) % pods);
            let patch = &patch;
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .expect("the plain client's patch");
            }
        })
        .await;
    started.elapsed()
}
