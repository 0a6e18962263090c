//! Who the operator under test is to the API server. By default every
//! operator the suite starts (in-process or `shardring run`) authenticates
//! as the ServiceAccount of `deploy/install.yaml`, with that file's RBAC and
//! admission policy applied and in force, exactly as an installed operator
//! does: a scenario that passes has made every write through the policy.
//! `SHARDRING_E2E_OPERATOR_IDENTITY=admin` runs them as the suite's own
//! user instead (to tell a policy denial from a bug while debugging).
//!
//! An operator that runs as the account calls `shardring-system` its own
//! namespace (`POD_NAMESPACE`), as in its pod: its Lease (named after the
//! test's namespace, so parallel tests do not share one) and the endpoint's
//! self-signed Secret (which the replicas of every test share, as replicas
//! do) live there, where the policy allows them.

use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;
use shardring_devkit::access;
use shardring_devkit::wait::{Probe, wait_for};
use tokio::sync::OnceCell;

use crate::cluster::{Cluster, Reachability, connect_with};

/// Environment variable choosing the operator's identity: `account`
/// (default) or `admin`.
pub const IDENTITY_ENV: &str = "SHARDRING_E2E_OPERATOR_IDENTITY";

/// The field manager the suite applies the access objects with.
const FIELD_MANAGER: &str = "shardring-e2e";
/// How long a new policy may take to be enforced (an API server picks up a
/// ValidatingAdmissionPolicy within a second or so).
const IN_FORCE_TIMEOUT: Duration = Duration::from_secs(60);

/// How the operator under test authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// As the operator's ServiceAccount, under its RBAC and policy.
    Account,
    /// As the suite's own user.
    Admin,
}

impl Identity {
    /// The identity [`IDENTITY_ENV`] selects (default: the account).
    pub fn from_env() -> Result<Self, AccountError> {
        match std::env::var(IDENTITY_ENV).as_deref() {
            Err(_) | Ok("") | Ok("account") => Ok(Self::Account),
            Ok("admin") => Ok(Self::Admin),
            Ok(other) => Err(AccountError::Identity(other.to_owned())),
        }
    }
}

/// Why the operator's identity could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// `SHARDRING_E2E_OPERATOR_IDENTITY` holds something else.
    #[error("{IDENTITY_ENV} must be `account` or `admin`, not {0:?}")]
    Identity(String),
    /// `deploy/install.yaml` could not be read.
    #[error("deploy/install.yaml: {0}")]
    Manifest(#[from] std::io::Error),
    /// Its access objects could not be applied.
    #[error("applying deploy/install.yaml's RBAC and policy: {0}")]
    Access(#[from] access::AccessError),
    /// No token could be issued for the account.
    #[error("the operator's ServiceAccount (its token, or who the API server says it is): {0}")]
    Token(#[from] kube::Error),
    /// The kubeconfig could not be read or written.
    #[error("the operator's kubeconfig: {0}")]
    Kubeconfig(String),
    /// The API server names the token's holder as someone else.
    #[error("the operator's client authenticates as {0:?}, not as {ACCOUNT_USER}")]
    NotTheAccount(String),
    /// The policy was not enforced in time.
    #[error("the admission policy is not in force: {0}")]
    NotInForce(String),
}

/// The user name of the operator's ServiceAccount.
const ACCOUNT_USER: &str = "system:serviceaccount:shardring-system:shardring";

/// The objects of `deploy/install.yaml` that decide the operator's access,
/// applied once per test process, and the policy seen in force.
static ACCESS: OnceCell<()> = OnceCell::const_new();

/// `base` as the operator reaches it under the identity [`IDENTITY_ENV`]
/// selects: for the account, a client and a kubeconfig (written under the
/// temp dir, named after `tag`) with a token of it (bound to `pod`, a name
/// and uid in the operator's namespace, when given) and the operator's
/// namespace as its own; for admin, `base` as it is. `admin` installs the
/// access objects the first time.
pub async fn operator_cluster(
    base: &Cluster,
    admin: &Client,
    tag: &str,
    pod: Option<(&str, &str)>,
) -> Result<Cluster, AccountError> {
    if Identity::from_env()? == Identity::Admin {
        return Ok(base.clone());
    }
    ACCESS.get_or_try_init(|| install_access(admin)).await?;
    let token = access::operator_token(admin, pod).await?;
    let kubeconfig = token_kubeconfig(base.kubeconfig.as_deref(), tag, &token)?;
    let client = client_of(&kubeconfig).await?;
    who_am_i(&client).await?;
    Ok(Cluster {
        client,
        kubeconfig: Some(kubeconfig),
        operator_namespace: Some(access::OPERATOR_NAMESPACE.to_owned()),
    })
}

/// Asks the API server who `client` is (a SelfSubjectReview): the
/// operator's ServiceAccount, or an error naming who it is instead.
async fn who_am_i(client: &Client) -> Result<(), AccountError> {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    let user = review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default();
    if user == ACCOUNT_USER {
        Ok(())
    } else {
        Err(AccountError::NotTheAccount(user))
    }
}

/// Applies the access objects and waits until the policy denies the
/// account a write it must not make.
async fn install_access(admin: &Client) -> Result<(), AccountError> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/install.yaml");
    access::apply_access(admin, &std::fs::read_to_string(&path)?, FIELD_MANAGER).await?;
    let token = access::operator_token(admin, None).await?;
    let kubeconfig = token_kubeconfig(None, "policy-probe", &token)?;
    let account = client_of(&kubeconfig).await?;
    wait_for("the policy in force", IN_FORCE_TIMEOUT, || {
        policy_denies(&account)
    })
    .await
    .map_err(|e| AccountError::NotInForce(e.to_string()))
}

/// Whether the policy refuses the account a ConfigMap in `kube-system`
/// (which RBAC alone would allow): a dry run, so nothing is written whether
/// or not the policy is in force yet.
async fn policy_denies(account: &Client) -> Result<Probe<()>, String> {
    let probe: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "shardring-e2e-policy-probe"},
        "data": {},
    }))
    .map_err(|e| e.to_string())?;
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match Api::<ConfigMap>::namespaced(account.clone(), "kube-system")
        .create(&params, &probe)
        .await
    {
        Err(kube::Error::Api(status)) if status.message.contains(access::POLICY_REFUSED) => {
            Ok(Probe::Done(()))
        }
        Ok(_) => Ok(Probe::Pending("the dry run was allowed".into())),
        Err(other) => Ok(Probe::Pending(other.to_string())),
    }
}

/// The kubeconfig `base` (else `KUBECONFIG`'s) with every user replaced by
/// `token`, written to the temp dir as `<tag>-operator.kubeconfig`.
pub fn token_kubeconfig(
    base: Option<&Path>,
    tag: &str,
    token: &str,
) -> Result<PathBuf, AccountError> {
    let source = match base {
        Some(path) => path.to_owned(),
        None => std::env::var_os("KUBECONFIG")
            .map(PathBuf::from)
            .ok_or_else(|| AccountError::Kubeconfig("KUBECONFIG is not set".into()))?,
    };
    let mut config =
        Kubeconfig::read_from(&source).map_err(|e| AccountError::Kubeconfig(e.to_string()))?;
    for user in &mut config.auth_infos {
        user.auth_info = Some(AuthInfo {
            token: Some(token.to_owned().into()),
            ..Default::default()
        });
    }
    let path = std::env::temp_dir().join(format!("{tag}-operator.kubeconfig"));
    let text =
        serde_yaml::to_string(&config).map_err(|e| AccountError::Kubeconfig(e.to_string()))?;
    // It holds a ServiceAccount's token: readable by this user only.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    // (An older file of the same name keeps its mode through the open.)
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    Ok(path)
}

/// A client of the kubeconfig at `path` (over TLS, as the operator's own).
async fn client_of(path: &Path) -> Result<Client, AccountError> {
    let kubeconfig =
        Kubeconfig::read_from(path).map_err(|e| AccountError::Kubeconfig(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| AccountError::Kubeconfig(e.to_string()))?;
    match connect_with(config).await {
        Reachability::Reachable { client, .. } => Ok(client),
        Reachability::Unreachable(why) => Err(AccountError::Kubeconfig(why)),
    }
}
