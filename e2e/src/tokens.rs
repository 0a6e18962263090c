//! What a consumer pod presents to, and trusts of, the consumer endpoint,
//! as its projected volume would hold them: a token of the namespace's
//! `default` service account bound to the pod (its name and uid) for an
//! audience, issued with a TokenRequest as the kubelet does, and the
//! endpoint's CA as the operator publishes it in the pod's namespace. The
//! suite's consumers run outside their pods (which are never scheduled),
//! so the suite writes both where the consumer reads them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client};
use shardring_crds::endpoint::{CA_CONFIGMAP_KEY, CA_CONFIGMAP_NAME};
use shardring_devkit::wait::{Probe, WaitError, wait_for};

use crate::settings::STEP_TIMEOUT;

/// Why a token could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// An API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The `default` service account did not appear.
    #[error(transparent)]
    Wait(#[from] WaitError),
    /// The pod has no uid, or the TokenRequest no status.
    #[error("{0}")]
    Incomplete(&'static str),
    /// The CA could not be written.
    #[error("writing the endpoint's CA: {0}")]
    Io(#[from] std::io::Error),
}

/// A token of `namespace`'s `default` service account bound to pod `pod`,
/// for `audience`, valid for ten minutes.
pub async fn pod_token(
    client: &Client,
    namespace: &str,
    pod: &str,
    audience: &str,
) -> Result<String, TokenError> {
    let uid = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(pod)
        .await?
        .metadata
        .uid
        .ok_or(TokenError::Incomplete("a pod without a uid"))?;
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    // The service-account controller creates `default` shortly after the
    // namespace.
    wait_for("the default service account", STEP_TIMEOUT, || {
        let accounts = accounts.clone();
        async move {
            Ok::<_, kube::Error>(match accounts.get_opt("default").await? {
                Some(_) => Probe::Done(()),
                None => Probe::Pending("not created yet".into()),
            })
        }
    })
    .await?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.to_owned()),
                uid: Some(uid),
            }),
            expiration_seconds: Some(i64::try_from(TOKEN_LIFETIME.as_secs()).unwrap_or(600)),
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request("default", &PostParams::default(), &request)
        .await?;
    Ok(issued
        .status
        .ok_or(TokenError::Incomplete("a TokenRequest without a status"))?
        .token)
}

/// Waits for the endpoint's CA in ConfigMap `shardring-endpoint-ca` of
/// `namespace` (the operator publishes it there) and writes it to
/// `dir/ca.crt`; returns that path.
pub async fn endpoint_ca(
    client: &Client,
    namespace: &str,
    dir: &Path,
) -> Result<PathBuf, TokenError> {
    let maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let pem = wait_for("the endpoint's CA ConfigMap", STEP_TIMEOUT, || {
        let maps = maps.clone();
        async move {
            let pem = maps
                .get_opt(CA_CONFIGMAP_NAME)
                .await?
                .and_then(|cm| cm.data?.get(CA_CONFIGMAP_KEY).cloned());
            Ok::<_, kube::Error>(match pem {
                Some(pem) => Probe::Done(pem),
                None => Probe::Pending("not published".into()),
            })
        }
    })
    .await?;
    let path = dir.join("ca.crt");
    std::fs::write(&path, pem)?;
    Ok(path)
}

/// How long an issued token is valid (the API server's minimum).
const TOKEN_LIFETIME: Duration = Duration::from_secs(600);
