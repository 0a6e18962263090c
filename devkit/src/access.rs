//! The operator's access as `deploy/install.yaml` ships it, on a real API
//! server: the objects that decide what the operator may do (its Namespace,
//! ServiceAccount, Roles, ClusterRole, bindings and the admission policy),
//! applied as they are, and tokens of that ServiceAccount, so a test or a
//! benchmark acts exactly as the installed operator would.

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::AuthInfo;
use kube::{Api, Client, Config, ResourceExt};
use serde::Deserialize;
use serde_json::Value;

/// The operator's namespace in `deploy/install.yaml`.
pub const OPERATOR_NAMESPACE: &str = "shardring-system";
/// The operator's ServiceAccount there.
pub const OPERATOR_ACCOUNT: &str = "shardring";
/// The admission policy's binding (its policy has the same name).
pub const POLICY_BINDING: &str = "shardring-operator-writes";
/// What every one of the policy's denial messages starts with.
pub const POLICY_REFUSED: &str = "shardring-operator-writes refused";

/// Why the access could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The manifest does not parse.
    #[error("deploy/install.yaml: {0}")]
    Manifest(#[from] serde_yaml::Error),
    /// An object is not a Kubernetes object.
    #[error("deploy/install.yaml: {0}")]
    Object(#[from] serde_json::Error),
    /// The API server refused a write.
    #[error("{0}")]
    Api(#[from] kube::Error),
}

/// The plural and scope of each kind that decides the operator's access.
fn access_kind(kind: &str) -> Option<(&'static str, bool)> {
    Some(match kind {
        "Namespace" => ("namespaces", false),
        "ServiceAccount" => ("serviceaccounts", true),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "ValidatingAdmissionPolicy" => ("validatingadmissionpolicies", false),
        "ValidatingAdmissionPolicyBinding" => ("validatingadmissionpolicybindings", false),
        _ => return None,
    })
}

/// Applies (server-side, as `field_manager`) the objects of `install` (the
/// text of `deploy/install.yaml`) that decide the operator's access; the
/// CRDs, the Deployment and the Services are left out.
pub async fn apply_access(
    client: &Client,
    install: &str,
    field_manager: &str,
) -> Result<(), AccessError> {
    let params = PatchParams::apply(field_manager).force();
    for document in serde_yaml::Deserializer::from_str(install) {
        let object = Value::deserialize(document)?;
        let kind = object["kind"].as_str().unwrap_or_default();
        let Some((plural, namespaced)) = access_kind(kind) else {
            continue;
        };
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let object: DynamicObject = serde_json::from_value(object)?;
        let api: Api<DynamicObject> = if namespaced {
            let namespace = object
                .namespace()
                .unwrap_or_else(|| OPERATOR_NAMESPACE.into());
            Api::namespaced_with(client.clone(), &namespace, &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        api.patch(&object.name_any(), &params, &Patch::Apply(&object))
            .await?;
    }
    Ok(())
}

/// A token of the operator's ServiceAccount (valid for an hour), bound to
/// `pod` (name, uid) when given, as the kubelet projects one into the
/// operator's pod: the API server then names that pod in the user's extra
/// `authentication.kubernetes.io/pod-name`.
pub async fn operator_token(
    client: &Client,
    pod: Option<(&str, &str)>,
) -> Result<String, kube::Error> {
    account_token(client, OPERATOR_ACCOUNT, pod).await
}

/// [`operator_token`] for the ServiceAccount `account` of the operator's
/// namespace (the chart names it after its release).
pub async fn account_token(
    client: &Client,
    account: &str,
    pod: Option<(&str, &str)>,
) -> Result<String, kube::Error> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            bound_object_ref: pod.map(|(name, uid)| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
            }),
        },
        ..Default::default()
    };
    let issued = Api::<ServiceAccount>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .create_token_request(account, &PostParams::default(), &request)
        .await?;
    Ok(issued.status.map(|s| s.token).unwrap_or_default())
}

/// `config` (the cluster, its CA) authenticating with `token` only.
pub fn with_token(mut config: Config, token: &str) -> Config {
    config.auth_info = AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    config
}
