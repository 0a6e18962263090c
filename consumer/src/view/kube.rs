//! The fast view source: a watch on the assignment ConfigMap through the
//! Kubernetes API, narrowed to that one object by
//! `fieldSelector=metadata.name=<name>`. Kubelet refreshes mounted files only
//! every sync period (up to a minute or more); a watch sees a new epoch
//! within milliseconds, which shortens every handoff.
//!
//! RBAC the consumer's ServiceAccount needs (namespaced Role):
//!
//! ```yaml
//! rules:
//!   - apiGroups: [""]
//!     resources: ["configmaps"]
//!     resourceNames: ["<shardgroup>-assignment"]  # only this ConfigMap
//!     verbs: ["get", "list", "watch"]
//! ```
//!
//! (`list`/`watch` with `resourceNames` are honoured when the request carries
//! the matching `metadata.name` field selector, which this source always sends.)

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::task::JoinHandle;

use super::ViewPublisher;
use shardring_crds::assignment::encoding;

/// Installs rustls' ring provider as the process default unless one is set.
/// kube enables ring and the AWS SDK enables aws-lc-rs, so rustls cannot pick
/// one by itself; call this before building a kube client by hand.
pub fn install_crypto_provider() {
    // Err means a provider is installed already: fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A kube client from the environment (in-cluster or KUBECONFIG).
pub async fn client() -> Result<Client, kube::Error> {
    install_crypto_provider();
    Client::try_default().await
}

/// Watches one ConfigMap and offers this pod's view from each version.
#[derive(Debug, Clone)]
pub struct ConfigMapSource {
    /// Namespace of the ConfigMap (the pod's own).
    pub namespace: String,
    /// `<shardgroup>-assignment` unless the ShardGroup names another.
    pub name: String,
    /// This pod's name.
    pub pod: String,
}

impl ConfigMapSource {
    /// Runs the watch until every reader of `publisher` is gone. The watcher
    /// re-lists and re-watches with backoff on errors (at most 4 s apart:
    /// [`super::watch_backoff`]); a deleted or
    /// undecodable ConfigMap never clears the view (not a revoke).
    pub fn spawn(self, client: Client, publisher: ViewPublisher) -> JoinHandle<()> {
        tokio::spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, &self.namespace);
            let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
            let mut stream = watcher::watcher(api, config)
                .backoff(super::watch_backoff::watch_backoff())
                .boxed();
            while let Some(event) = stream.next().await {
                if publisher.is_closed() {
                    return;
                }
                let config_map = match event {
                    Ok(Event::Apply(cm) | Event::InitApply(cm)) => cm,
                    Ok(_) => continue,
                    Err(error) => {
                        tracing::warn!(%error, configmap = %self.name, "assignment watch error; retrying");
                        continue;
                    }
                };
                match encoding::decode(config_map.data.as_ref(), config_map.binary_data.as_ref()) {
                    Ok(document) => {
                        let view = document.pod_view(&self.pod);
                        if publisher.offer(view.clone()) {
                            tracing::info!(epoch = view.epoch, active = ?view.active, revoking = ?view.revoking, "assignment view changed");
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, configmap = %self.name, "cannot decode the assignment; keeping the last view");
                    }
                }
            }
        })
    }
}
