//! Pool-wide balance through `shardring run` on the real control plane: 20
//! static ShardGroups of 2 partitions on one ConsumerPool of 8 pods that
//! became Ready a minute apart (as a rolling deploy leaves them). Planned
//! group by group, every group's extras went to the two youngest pods
//! (0,0,0,0,0,0,20,20); planned over the pool, every pod reads 5. Then the
//! oldest pod is deleted and a new one joins: the pool is balanced again,
//! every group still within one partition of its own. And a surge rolling
//! deploy of the pool (a new pod, then the oldest deleted, eight times,
//! faster than the rebalance delay) moves every partition of every group
//! exactly once, counted from a watch of the documents, and leaves the pool
//! balanced. Without a cluster it prints `SKIPPED: ...` and passes.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use shardring_crds::{CONTROLLER_CLASS_LABEL, ConsumerPool, ShardGroup};
use shardring_devkit::fixtures;
use shardring_e2e::harness::CONTROLLER_CLASS;
use shardring_e2e::namespace::{apply_crds, create_namespace};
use shardring_e2e::published::assignment_document;

use crate::kit_group::{
    Running, TestResult, in_fresh_namespace, moves_up_to_now, ready_pod, reconciles_total,
    scrape_metrics, start_operator, wait_until, watch_owners_of,
};

/// A pool's shape: its groups, each group's partitions, its pods.
#[derive(Debug, Clone, Copy)]
struct Shape {
    groups: usize,
    partitions: u32,
    pods: usize,
}

/// The pool of the first two tests: 20 groups of 2 on 8 pods.
const TWENTY: Shape = Shape {
    groups: 20,
    partitions: 2,
    pods: 8,
};
const WAIT: Duration = Duration::from_secs(90);
const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));

#[tokio::test]
async fn twenty_groups_on_one_pool_are_balanced_over_the_pool() {
    in_fresh_namespace("pool-balance", "pool", scenario).await;
}

#[tokio::test]
async fn a_rolling_deploy_of_the_pool_moves_each_partition_once() {
    in_fresh_namespace("pool-rolling", "pool-roll", rolling_deploy).await;
}

/// The four pools on pods Ready a minute apart (planned group by
/// group: 0,0,0,0,0,0,20,20; 10,10,20; 0,6,6,6; 36,36,36,36,48): every pod
/// within one partition of the others over all groups.
#[tokio::test]
async fn the_pools_that_were_skewed_are_balanced() {
    for shape in [
        Shape {
            groups: 10,
            partitions: 4,
            pods: 3,
        },
        Shape {
            groups: 6,
            partitions: 3,
            pods: 4,
        },
        Shape {
            groups: 12,
            partitions: 16,
            pods: 5,
        },
    ] {
        in_fresh_namespace("pool-shapes", "pool-shape", async |client, namespace| {
            let _operator = install(client, namespace, "0s", shape).await?;
            let live: Vec<String> = (0..shape.pods).map(|i| format!("p-{i}")).collect();
            let totals = wait_balanced(client, namespace, &live, shape).await?;
            println!(
                "pool balance: {} x {} on {} pods Ready a minute apart: {:?}",
                shape.groups,
                shape.partitions,
                shape.pods,
                totals.values().collect::<Vec<_>>()
            );
            Ok(())
        })
        .await;
    }
}

fn group_name(g: usize) -> String {
    format!("g-{g:02}")
}

/// The pool of `shape`'s staggered pods and groups (rebalance delay
/// `delay`), with `shardring run` serving them; its metrics port.
async fn install(
    client: &Client,
    namespace: &str,
    delay: &str,
    shape: Shape,
) -> TestResult<(Running, u16)> {
    apply_crds(client).await?;
    create_namespace(client, namespace).await?;
    let pool: ConsumerPool = serde_json::from_value(fixtures::pool(namespace, "p", "consumer"))?;
    Api::<ConsumerPool>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pool)
        .await?;
    let now = jiff::Timestamp::now();
    for i in 0..shape.pods {
        let minutes = i64::try_from(shape.pods - i)?;
        let since = (now - jiff::SignedDuration::from_mins(minutes)).to_string();
        ready_pod(client, namespace, &format!("p-{i}"), "consumer", &since, IP).await?;
    }
    let groups = Api::<ShardGroup>::namespaced(client.clone(), namespace);
    for g in 0..shape.groups {
        let mut group = fixtures::static_group(namespace, &group_name(g), "p", shape.partitions);
        group["metadata"]["labels"] = json!({ CONTROLLER_CLASS_LABEL: CONTROLLER_CLASS });
        group["spec"]["rebalance"]["delay"] = json!(delay);
        groups
            .create(&PostParams::default(), &serde_json::from_value(group)?)
            .await?;
    }
    start_operator(client, namespace).await
}

/// Each group's document ConfigMap and its resourceVersion.
async fn document_versions(
    client: &Client,
    namespace: &str,
) -> TestResult<BTreeMap<String, String>> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let mut versions = BTreeMap::new();
    for g in 0..TWENTY.groups {
        let name = format!("{}-assignment", group_name(g));
        let map = config_maps.get(&name).await?;
        versions.insert(name, map.metadata.resource_version.unwrap_or_default());
    }
    Ok(versions)
}

async fn scenario(client: &Client, namespace: &str) -> TestResult {
    let (operator, metrics_port) = install(client, namespace, "0s", TWENTY).await?;
    let live: Vec<String> = (0..TWENTY.pods).map(|i| format!("p-{i}")).collect();
    let totals = wait_balanced(client, namespace, &live, TWENTY).await?;
    println!("pool balance: 20 x 2 on 8 pods Ready a minute apart: {totals:?}");
    // `kubectl get cpool` shows it: 20 groups, 40 shards, 5 to 5 a pod.
    let pools = Api::<ConsumerPool>::namespaced(client.clone(), namespace);
    wait_until("the pool's status to show the balance", WAIT, || async {
        let pool = pools.get("p").await.map_err(|e| e.to_string())?;
        let status = pool.status.unwrap_or_default();
        let seen = (
            status.pods,
            status.ready_pods,
            status.groups,
            status.shards,
            status.fewest_shards_per_pod,
            status.most_shards_per_pod,
        );
        let want = (8, 8, 20, 40, Some(5), Some(5));
        if seen == want {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await?;
    // ...and so do the operator's metrics.
    wait_until("the pool spread in /metrics", WAIT, || async {
        let text = scrape_metrics(metrics_port)?;
        let labels = format!("namespace=\"{namespace}\",consumerpool=\"p\"");
        let want = [
            format!("shardring_pool_shards_per_pod{{{labels},bound=\"min\"}} 5"),
            format!("shardring_pool_shards_per_pod{{{labels},bound=\"max\"}} 5"),
        ];
        match want.iter().find(|line| !text.contains(line.as_str())) {
            None => Ok(()),
            Some(missing) => Err(format!("no {missing}")),
        }
    })
    .await?;

    // A restarted operator (its pool books lost) deals the pool again from
    // the documents at rest: it reconciles every group and writes none.
    drop(operator);
    let versions = document_versions(client, namespace).await?;
    let (_operator, metrics_port) = start_operator(client, namespace).await?;
    wait_until(
        "the new operator to reconcile every group",
        WAIT,
        || async {
            let reconciles = reconciles_total(metrics_port)?;
            if reconciles >= TWENTY.groups as f64 {
                Ok(())
            } else {
                Err(format!("{reconciles} reconciles"))
            }
        },
    )
    .await?;
    if document_versions(client, namespace).await? != versions {
        return Err("the restarted operator rewrote documents of a pool at rest".into());
    }

    // Three groups' documents deleted: each is written back as it was (from
    // the last one the operator held), and the pool keeps its totals.
    let deleted = [0, 7, 13].map(group_name);
    let before = active_owners(client, namespace, &deleted).await?;
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    for group in &deleted {
        config_maps
            .delete(&format!("{group}-assignment"), &DeleteParams::default())
            .await?;
    }
    wait_until(
        "the deleted documents written back as they were",
        WAIT,
        || async {
            let now = active_owners(client, namespace, &deleted).await?;
            if now == before {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await?;
    let again = wait_balanced(client, namespace, &live, TWENTY).await?;
    assert_eq!(
        again, totals,
        "the pool's totals after the documents came back"
    );
    println!("pool balance: 3 deleted documents written back as they were, totals {again:?}");

    // The oldest pod goes, a new one joins.
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    pods.delete("p-0", &DeleteParams::default().grace_period(0))
        .await?;
    ready_pod(
        client,
        namespace,
        "p-8",
        "consumer",
        &jiff::Timestamp::now().to_string(),
        IP,
    )
    .await?;
    let live: Vec<String> = (1..=TWENTY.pods).map(|i| format!("p-{i}")).collect();
    let totals = wait_balanced(client, namespace, &live, TWENTY).await?;
    println!("pool balance after p-0 left and p-8 joined: {totals:?}");
    Ok(())
}

async fn rolling_deploy(client: &Client, namespace: &str) -> TestResult {
    // Longer than the roll: only required moves until it is done.
    let (_operator, _) = install(client, namespace, "1h", TWENTY).await?;
    let mut live: Vec<String> = (0..TWENTY.pods).map(|i| format!("p-{i}")).collect();
    wait_balanced(client, namespace, &live, TWENTY).await?;
    let partitions = TWENTY.groups * TWENTY.partitions as usize;
    let (owners, watch) = watch_owners_of(client, namespace, partitions).await?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    for step in 0..TWENTY.pods {
        let new = format!("q-{step}");
        ready_pod(
            client,
            namespace,
            &new,
            "consumer",
            &jiff::Timestamp::now().to_string(),
            IP,
        )
        .await?;
        live.push(new);
        let old = live.remove(0);
        pods.delete(&old, &DeleteParams::default().grace_period(0))
            .await?;
        wait_empty(client, namespace, &old).await?;
    }
    let totals = wait_balanced(client, namespace, &live, TWENTY).await?;
    let moves = moves_up_to_now(client, namespace, &owners).await?;
    watch.abort();
    println!("pool rolling deploy: {moves} moves of {partitions} partitions; after it: {totals:?}");
    if moves != partitions {
        return Err(format!("{moves} moves over the rolling deploy, not one per partition").into());
    }
    Ok(())
}

/// Waits until no document names `pod` as reading or revoking anything.
async fn wait_empty(client: &Client, namespace: &str, pod: &str) -> TestResult {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    wait_until(&format!("{pod} to hold nothing"), WAIT, || async {
        for g in 0..TWENTY.groups {
            let name = format!("{}-assignment", group_name(g));
            let Some(map) = config_maps
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
            else {
                continue;
            };
            let doc = assignment_document(&map).map_err(|e| e.to_string())?;
            if let Some(entry) = doc.pods.get(pod)
                && !(entry.active.is_empty() && entry.revoking.is_empty())
            {
                return Err(format!("{name}: {pod} still holds {entry:?}"));
            }
        }
        Ok(())
    })
    .await
}

/// Waits until every group's document has its partitions active on `live`
/// Each of `groups`' active shards and their owners, from its document
/// (an error while one has none).
async fn active_owners(
    client: &Client,
    namespace: &str,
    groups: &[String],
) -> Result<BTreeMap<String, String>, String> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let mut owners = BTreeMap::new();
    for group in groups {
        let name = format!("{group}-assignment");
        let map = config_maps
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no {name}"))?;
        let doc = assignment_document(&map).map_err(|e| e.to_string())?;
        for (pod, entry) in &doc.pods {
            for shard in &entry.active {
                owners.insert(shard.clone(), pod.clone());
            }
        }
    }
    Ok(owners)
}

/// pods only, nothing revoking, each group within one partition per pod,
/// and every live pod within one partition of the others over all groups;
/// returns the totals per pod.
async fn wait_balanced(
    client: &Client,
    namespace: &str,
    live: &[String],
    shape: Shape,
) -> TestResult<BTreeMap<String, usize>> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let what = format!("every group active on {live:?}, balanced over the pool");
    wait_until(&what, WAIT, || async {
        let mut totals: BTreeMap<String, usize> = live.iter().map(|p| (p.clone(), 0)).collect();
        for g in 0..shape.groups {
            let name = format!("{}-assignment", group_name(g));
            let map = config_maps
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no {name}"))?;
            let doc = assignment_document(&map).map_err(|e| e.to_string())?;
            let mut own: BTreeMap<&str, usize> = live.iter().map(|p| (p.as_str(), 0)).collect();
            for (pod, entry) in &doc.pods {
                if !entry.revoking.is_empty() {
                    return Err(format!("{name}: {pod} is revoking {:?}", entry.revoking));
                }
                if entry.active.is_empty() {
                    continue;
                }
                let count = own.get_mut(pod.as_str()).ok_or_else(|| {
                    format!("{name}: {pod} is not live and reads {:?}", entry.active)
                })?;
                *count += entry.active.len();
            }
            let active: usize = own.values().sum();
            if active != shape.partitions as usize {
                return Err(format!("{name}: {active} of {} active", shape.partitions));
            }
            let (min, max) = (own.values().min(), own.values().max());
            if max.zip(min).is_some_and(|(max, min)| max - min > 1) {
                return Err(format!("{name} unbalanced: {own:?}"));
            }
            for (pod, count) in own {
                *totals.get_mut(pod).expect("a live pod") += count;
            }
        }
        let min = totals.values().min().copied().unwrap_or(0);
        let max = totals.values().max().copied().unwrap_or(0);
        if max - min > 1 {
            return Err(format!("pool unbalanced: {totals:?}"));
        }
        Ok(totals)
    })
    .await
}
