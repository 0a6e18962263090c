//! The waits on what the operator published for the fixture: the ConfigMap's
//! document (every shard active on exactly one expected pod, balanced within
//! one), every pod's annotation at an epoch, the ShardGroup's `Ready`
//! condition, and the annotations' removal.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::{Api, Client};
use shardring_crds::{AssignmentDocument, ShardGroup};
use shardring_e2e::harness::STEP_TIMEOUT;
use shardring_e2e::{Operator, Probe, assignment_document, pod_view, wait_for};

use super::TestResult;
use super::fixture::Fixture;

/// Waits until the ConfigMap holds a document in which exactly `pods` hold
/// every shard, each shard active on exactly one of them, balanced within one.
pub(super) async fn wait_for_assignment(
    client: &Client,
    fx: &Fixture,
    pods: &[String],
    operator: &mut Operator,
) -> TestResult<AssignmentDocument> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &fx.namespace);
    let expected: BTreeSet<&str> = pods.iter().map(String::as_str).collect();
    let what = format!(
        "ConfigMap {} to assign {} shards to {pods:?}",
        fx.config_map, fx.shards
    );
    let doc = wait_for(&what, STEP_TIMEOUT, || {
        let alive = operator.check_running();
        let config_maps = config_maps.clone();
        let expected = expected.clone();
        async move {
            alive?;
            let Some(cm) = config_maps.get_opt(&fx.config_map).await? else {
                return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Probe::Pending(
                    "no ConfigMap".into(),
                ));
            };
            let doc = assignment_document(&cm)?;
            Ok(match check_document(&doc, &expected, fx.shards) {
                Ok(()) => Probe::Done(doc),
                Err(problem) => Probe::Pending(format!("epoch {}: {problem}", doc.epoch)),
            })
        }
    })
    .await?;
    Ok(doc)
}

/// Every shard active on exactly one expected pod, loads within one.
fn check_document(
    doc: &AssignmentDocument,
    expected: &BTreeSet<&str>,
    shards: usize,
) -> Result<(), String> {
    let mut owners: BTreeMap<&str, &str> = BTreeMap::new();
    let mut loads: BTreeMap<&str, usize> = expected.iter().map(|pod| (*pod, 0)).collect();
    for (pod, assignment) in &doc.pods {
        if !assignment.active.is_empty() && !expected.contains(pod.as_str()) {
            return Err(format!(
                "pod {pod} is not in the pool but holds {:?}",
                assignment.active
            ));
        }
        if !assignment.revoking.is_empty() {
            return Err(format!(
                "pod {pod} is still revoking {:?}",
                assignment.revoking
            ));
        }
        for shard in &assignment.active {
            if let Some(other) = owners.insert(shard, pod) {
                return Err(format!("shard {shard} is active on both {other} and {pod}"));
            }
            *loads.entry(pod).or_default() += 1;
        }
    }
    if owners.len() != shards {
        return Err(format!("{} of {shards} shards active", owners.len()));
    }
    let (min, max) = (loads.values().min().copied(), loads.values().max().copied());
    match (min, max) {
        (Some(min), Some(max)) if max - min <= 1 => Ok(()),
        _ => Err(format!("unbalanced loads {loads:?}")),
    }
}

/// Waits until each pod's annotation carries at least `epoch` and, together,
/// the views cover every shard.
pub(super) async fn wait_for_annotations(
    client: &Client,
    fx: &Fixture,
    pods: &[String],
    epoch: u64,
) -> TestResult {
    let api = Api::<Pod>::namespaced(client.clone(), &fx.namespace);
    wait_for(
        &format!("annotations at epoch >= {epoch} on {pods:?}"),
        STEP_TIMEOUT,
        || async {
            let mut active = BTreeSet::new();
            for name in pods {
                let pod = api.get(name).await?;
                match pod_view(&pod, &fx.annotation_key)? {
                    Some(view) if view.epoch >= epoch => active.extend(view.active),
                    Some(view) => {
                        return Ok(Probe::Pending(format!("{name} at epoch {}", view.epoch)));
                    }
                    None => return Ok(Probe::Pending(format!("{name} has no annotation"))),
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(if active.len() == fx.shards {
                Probe::Done(())
            } else {
                Probe::Pending(format!(
                    "views cover {} of {} shards",
                    active.len(),
                    fx.shards
                ))
            })
        },
    )
    .await?;
    Ok(())
}

/// Waits for the ShardGroup's `Ready` condition to be `True` for its current generation.
pub(super) async fn wait_for_ready(client: &Client, fx: &Fixture) -> TestResult {
    let api = Api::<ShardGroup>::namespaced(client.clone(), &fx.namespace);
    wait_for(
        &format!("ShardGroup {} Ready=True", fx.name),
        STEP_TIMEOUT,
        || async {
            let group = api.get(&fx.name).await?;
            let status = group.status.as_ref();
            let ready = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
            let observed = status.and_then(|s| s.observed_generation);
            Ok::<_, kube::Error>(match ready {
                Some(c) if c.status == "True" && observed == group.metadata.generation => {
                    Probe::Done(())
                }
                Some(c) => {
                    Probe::Pending(format!("Ready={} ({}: {})", c.status, c.reason, c.message))
                }
                None => Probe::Pending("no Ready condition".into()),
            })
        },
    )
    .await?;
    Ok(())
}

/// Waits until none of `pods` carries the group's annotation.
pub(super) async fn wait_for_no_annotations(
    client: &Client,
    fx: &Fixture,
    pods: &[String],
) -> TestResult {
    let api = Api::<Pod>::namespaced(client.clone(), &fx.namespace);
    wait_for("annotations to be removed", STEP_TIMEOUT, || async {
        for name in pods {
            if pod_view(&api.get(name).await?, &fx.annotation_key)?.is_some() {
                return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Probe::Pending(format!(
                    "{name} still annotated"
                )));
            }
        }
        Ok(Probe::Done(()))
    })
    .await?;
    Ok(())
}
