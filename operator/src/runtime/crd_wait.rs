//! Start-up gate: wait until the shardring CRDs are installed and
//! `Established` before any controller watches them, and fail with an error
//! that names the missing CRDs and the command that installs them.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::wait::{Condition, await_condition, conditions};
use kube::{Api, Client};
use tokio::time::Instant;

/// The CRDs `shardring run` needs.
pub const SHARDRING_CRDS: &[&str] = &["shardgroups.shardring.io", "consumerpools.shardring.io"];

/// How to install the CRDs, quoted in [`CrdWaitError::Missing`].
pub(crate) const INSTALL_HINT: &str = "install them with `kubectl apply -f deploy/install.yaml` \
     or `shardring crds | kubectl apply -f -`";

/// Errors of [`wait_for_crds_established`].
#[derive(Debug, thiserror::Error)]
pub enum CrdWaitError {
    /// One or more CRDs do not exist in the cluster.
    #[error("CustomResourceDefinition(s) not installed: {}; {INSTALL_HINT}", names.join(", "))]
    Missing {
        /// The CRDs that do not exist.
        names: Vec<String>,
    },
    /// The CRD exists but the API server never marked it `Established`.
    #[error(
        "CustomResourceDefinition {name} exists but was not Established within {timeout:?}; \
         see `kubectl describe crd {name}`"
    )]
    NotEstablished {
        /// The CRD that is not ready.
        name: String,
        /// The time waited.
        timeout: Duration,
    },
    /// Reading or watching CRDs failed (often RBAC: the operator needs
    /// get/list/watch on customresourcedefinitions).
    #[error("cannot watch CustomResourceDefinition {name}: {source}")]
    Api {
        /// The CRD being read.
        name: String,
        /// The client error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl CrdWaitError {
    /// Constant label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CrdWaitError::Missing { .. } => "crd_missing",
            CrdWaitError::NotEstablished { .. } => "crd_not_established",
            CrdWaitError::Api { .. } => "crd_api_error",
        }
    }
}

/// Waits until every CRD in `names` (e.g. [`SHARDRING_CRDS`]) has the
/// condition `Established=True`, for at most `timeout` in total. CRDs applied
/// while we wait (e.g. by the same `kubectl apply`) are picked up.
pub async fn wait_for_crds_established(
    client: Client,
    names: &[&str],
    timeout: Duration,
) -> Result<(), CrdWaitError> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let deadline = Instant::now() + timeout;
    for (index, name) in names.iter().enumerate() {
        let wait = await_condition(api.clone(), name, conditions::is_crd_established());
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(Ok(_)) => tracing::debug!(crd = name, "CRD established"),
            Ok(Err(error)) => {
                return Err(CrdWaitError::Api {
                    name: (*name).to_owned(),
                    source: Box::new(error),
                });
            }
            Err(_elapsed) => return Err(explain_timeout(&api, &names[index..], timeout).await),
        }
    }
    tracing::info!(crds = ?names, "CRDs established");
    Ok(())
}

/// After a timeout, tells "not installed" (listing every missing CRD) from
/// "installed but not established".
async fn explain_timeout(
    api: &Api<CustomResourceDefinition>,
    remaining: &[&str],
    timeout: Duration,
) -> CrdWaitError {
    let mut missing = Vec::new();
    let mut not_established = None;
    for name in remaining {
        match api.get_opt(name).await {
            Ok(None) => missing.push((*name).to_owned()),
            Ok(Some(crd)) => {
                if !conditions::is_crd_established().matches_object(Some(&crd)) {
                    not_established.get_or_insert_with(|| (*name).to_owned());
                }
            }
            Err(error) => {
                return CrdWaitError::Api {
                    name: (*name).to_owned(),
                    source: Box::new(error),
                };
            }
        }
    }
    match (missing.is_empty(), not_established) {
        (false, _) => CrdWaitError::Missing { names: missing },
        (true, Some(name)) => CrdWaitError::NotEstablished { name, timeout },
        // Everything became established between the timeout and our check:
        // still a timeout; name the first CRD we were waiting for.
        (true, None) => CrdWaitError::NotEstablished {
            name: remaining.first().copied().unwrap_or_default().to_owned(),
            timeout,
        },
    }
}
