//! A test's place on the cluster under test: the shardring CRDs
//! server-side applied and Established, a fresh namespace with a unique
//! name labelled as the suite's, and its removal afterwards (leftover
//! ShardGroup finalizers dropped first, since the operator may be gone by
//! then). The CRDs stay: deleting them would delete every ShardGroup in the
//! cluster. Used by the scenario harness and the cluster test alike.

use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, conditions};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use shardring_crds::ShardGroup;

use crate::error::HarnessError;
use crate::settings::{MANAGER, STEP_TIMEOUT};
use shardring_devkit::wait::{Probe, wait_for};

/// A namespace name of its own for `scenario`: `sr-e2e-<scenario>-<random>`.
pub fn unique_namespace(scenario: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("sr-e2e-{scenario}-{:x}{:x}", std::process::id(), nanos)
}

/// Server-side applies the shardring CRDs and waits until each is Established.
pub async fn apply_crds(client: &Client) -> Result<(), HarnessError> {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in shardring_crds::crd::crds() {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await?;
        wait_for(&format!("CRD {name} Established"), STEP_TIMEOUT, || {
            let (crds, name) = (crds.clone(), name.clone());
            async move {
                let crd = crds.get_opt(&name).await?;
                Ok::<_, HarnessError>(
                    if conditions::is_crd_established().matches_object(crd.as_ref()) {
                        Probe::Done(())
                    } else {
                        Probe::Pending("not Established".into())
                    },
                )
            }
        })
        .await?;
    }
    Ok(())
}

/// Creates `namespace`, labelled as the suite's, with its `default`
/// ServiceAccount: the API server admits no pod into a namespace without
/// it, and the controller-manager that creates it may lag (on a loaded
/// machine, or for a while after an API server restart). Creating it here
/// (AlreadyExists: the controller-manager was first) makes the namespace
/// ready for pods at once, on every cluster and on the mock.
pub async fn create_namespace(client: &Client, namespace: &str) -> Result<(), HarnessError> {
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": namespace, "labels": {"app.kubernetes.io/part-of": "shardring-e2e"}}
    }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
    match Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &account)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Deletes `namespace` and everything in it, even after a failure: the
/// finalizers of leftover ShardGroups are dropped first (when they can be
/// listed at all), since no operator may be left to run them. A namespace
/// already gone is fine.
pub async fn delete_namespace(client: &Client, namespace: &str) -> Result<(), HarnessError> {
    let groups = Api::<ShardGroup>::namespaced(client.clone(), namespace);
    if let Ok(list) = groups.list(&ListParams::default()).await {
        for group in list {
            let patch = json!({"metadata": {"finalizers": null}});
            groups
                .patch(
                    &group.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
        }
    }
    match Api::<Namespace>::all(client.clone())
        .delete(namespace, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_valid_dns_labels() {
        let ns = unique_namespace("update-shard-count");
        assert!(ns.len() <= 63, "{ns}");
        assert!(
            ns.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
}
