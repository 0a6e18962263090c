//! Pools that share pods, and standby slots, balanced as one through
//! `shardring run` on the real control plane. Six Ready pods; pool `a`
//! selects p-0..p-3 and pool `b` p-2..p-5 (p-2 and p-3 serve both, and
//! became Ready first); five static groups of 2 partitions with one
//! standby each on each pool. Dealt pool by pool, each pool's extras go to
//! its youngest pods and p-2, p-3 read 4 against a share of 5. The operator
//! finds that the two pools share pods and deals all ten groups together:
//! every group reads only its own pool's pods, within one partition per
//! pod; every pod's total over both pools' groups is within one of the sum
//! of its shares (2.5 on p-0, p-1, p-4, p-5; 5 on p-2, p-3), and so are its
//! standby slots; each group's status names the balance (`poolBalance`),
//! each pool's the other (`balancedWith`).
//! Without a cluster it prints `SKIPPED: ...` and passes.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use shardring_crds::{CONTROLLER_CLASS_LABEL, ConsumerPool, ShardGroup};
use shardring_devkit::fixtures;
use shardring_e2e::harness::CONTROLLER_CLASS;
use shardring_e2e::namespace::{apply_crds, create_namespace};
use shardring_e2e::published::assignment_document;

use crate::kit_group::{
    Running, TestResult, in_fresh_namespace, ready_pod, shardring_run, wait_until,
};

const WAIT: Duration = Duration::from_secs(90);
const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const PARTITIONS: u32 = 2;
const GROUPS_PER_POOL: usize = 5;

/// The pods each pool selects.
fn members(pool: &str) -> Vec<String> {
    let range = if pool == "a" { 0..4 } else { 2..6 };
    range.map(|i| format!("p-{i}")).collect()
}

fn groups() -> Vec<(String, &'static str)> {
    ["a", "b"]
        .into_iter()
        .flat_map(|pool| (0..GROUPS_PER_POOL).map(move |g| (format!("{pool}-{g}"), pool)))
        .collect()
}

#[tokio::test]
async fn pools_that_share_pods_are_balanced_as_one_with_their_standbys() {
    in_fresh_namespace("pool-shared", "pool-shared", scenario).await;
}

async fn scenario(client: &Client, namespace: &str) -> TestResult {
    apply_crds(client).await?;
    create_namespace(client, namespace).await?;
    let pools = Api::<ConsumerPool>::namespaced(client.clone(), namespace);
    for name in ["a", "b"] {
        let mut pool = fixtures::pool(namespace, name, "consumer");
        pool["spec"]["selector"] = json!({"matchLabels": {format!("pool-{name}"): "yes"}});
        pools
            .create(&PostParams::default(), &serde_json::from_value(pool)?)
            .await?;
    }
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let now = jiff::Timestamp::now();
    for i in 0..6 {
        let name = format!("p-{i}");
        // p-2 and p-3 became Ready first: dealt pool by pool they would
        // lose every tie for an extra partition to the younger pods.
        let minutes: i64 = if (2..4).contains(&i) { 10 } else { 6 - i };
        let since = (now - jiff::SignedDuration::from_mins(minutes)).to_string();
        ready_pod(client, namespace, &name, "consumer", &since, IP).await?;
        let mut labels = serde_json::Map::new();
        for pool in ["a", "b"] {
            if members(pool).contains(&name) {
                labels.insert(format!("pool-{pool}"), json!("yes"));
            }
        }
        let patch = json!({"metadata": {"labels": labels}});
        pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let shard_groups = Api::<ShardGroup>::namespaced(client.clone(), namespace);
    for (name, pool) in groups() {
        let mut group = fixtures::static_group(namespace, &name, pool, PARTITIONS);
        group["metadata"]["labels"] = json!({ CONTROLLER_CLASS_LABEL: CONTROLLER_CLASS });
        group["spec"]["standbys"] = json!(1);
        shard_groups
            .create(&PostParams::default(), &serde_json::from_value(group)?)
            .await?;
    }
    let _operator = Running(
        shardring_run(client, namespace, "operator-0", None)
            .await?
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--endpoint-addr", "127.0.0.1:0"])
            .spawn()?,
    );
    let (active, standby) = wait_balanced(client, namespace).await?;
    println!("pools a and b sharing p-2, p-3: active {active:?}, standby slots {standby:?}");

    wait_until("every group's status to name the balance", WAIT, || async {
        for (name, _) in groups() {
            let group = shard_groups.get(&name).await.map_err(|e| e.to_string())?;
            let balance = group.status.and_then(|s| s.pool_balance);
            let seen = balance
                .as_ref()
                .map(|b| (b.pools.clone(), b.groups, b.standby_groups));
            if seen != Some((vec!["a".into(), "b".into()], 10, 10)) {
                return Err(format!("{name}: {seen:?}"));
            }
        }
        Ok(())
    })
    .await?;
    wait_until("each pool's status to name the other", WAIT, || async {
        for (name, other) in [("a", "b"), ("b", "a")] {
            let pool = pools.get(name).await.map_err(|e| e.to_string())?;
            let with = pool.status.map(|s| s.balanced_with).unwrap_or_default();
            if with != [other] {
                return Err(format!("{name}: balancedWith {with:?}"));
            }
        }
        Ok(())
    })
    .await?;
    Ok(())
}

/// Waits until every group reads its partitions on its own pool's pods,
/// within one per pod, nothing revoking, and every pod's active and
/// standby totals are within one of their shares; returns the totals.
async fn wait_balanced(
    client: &Client,
    namespace: &str,
) -> TestResult<(BTreeMap<String, usize>, BTreeMap<String, usize>)> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    wait_until("the ten groups balanced over both pools", WAIT, || async {
        let mut active: BTreeMap<String, usize> = BTreeMap::new();
        let mut standby: BTreeMap<String, usize> = BTreeMap::new();
        let mut share: BTreeMap<String, f64> = BTreeMap::new();
        for (name, pool) in groups() {
            let own = members(pool);
            let map = config_maps
                .get_opt(&format!("{name}-assignment"))
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no document of {name}"))?;
            let doc = assignment_document(&map).map_err(|e| e.to_string())?;
            let mut counts: BTreeMap<&str, usize> = own.iter().map(|p| (p.as_str(), 0)).collect();
            for (pod, entry) in &doc.pods {
                if !entry.revoking.is_empty() {
                    return Err(format!("{name}: {pod} revokes {:?}", entry.revoking));
                }
                let reads = entry.active.len() + entry.standby.len();
                if reads > 0 && !own.contains(pod) {
                    return Err(format!("{name}: {pod} is not pool {pool}'s"));
                }
                if let Some(count) = counts.get_mut(pod.as_str()) {
                    *count += entry.active.len();
                }
                *active.entry(pod.clone()).or_default() += entry.active.len();
                *standby.entry(pod.clone()).or_default() += entry.standby.len();
            }
            if counts.values().sum::<usize>() != PARTITIONS as usize {
                return Err(format!("{name}: {counts:?}"));
            }
            let (min, max) = (counts.values().min(), counts.values().max());
            if max.zip(min).is_some_and(|(a, b)| a - b > 1) {
                return Err(format!("{name} unbalanced: {counts:?}"));
            }
            for pod in &own {
                *share.entry(pod.clone()).or_default() += f64::from(PARTITIONS) / own.len() as f64;
            }
        }
        for (pod, share) in &share {
            for (what, totals) in [("active", &active), ("standby", &standby)] {
                let got = totals.get(pod).copied().unwrap_or(0) as f64;
                if (got - share).abs() >= 1.0 {
                    return Err(format!("{pod}: {got} {what} vs a share of {share}"));
                }
            }
        }
        Ok((active, standby))
    })
    .await
}
