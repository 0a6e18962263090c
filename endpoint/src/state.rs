//! [`EndpointState`]: what the controller and the endpoint's server share
//! (the served views, the acknowledged releases, the measured loads, the CA
//! consumers trust, and the reconcile requests).

use std::sync::Arc;

use tokio::sync::watch;

use crate::directory::Directory;
use crate::loads::Loads;
use crate::releases::Releases;
use crate::requests::ReconcileRequests;

/// What the controller and the endpoint's server share: the served views,
/// the acknowledged releases, and the CA certificate (PEM) consumers must
/// trust, which the controller publishes in each namespace with a
/// ShardGroup (`None`: the certificate's issuer is not known, e.g. a
/// mounted certificate without `ca.crt`).
#[derive(Debug, Clone)]
pub struct EndpointState {
    /// Views, written by the controller, read by the server.
    pub directory: Arc<Directory>,
    /// Releases, written by the server, read by the controller.
    pub releases: Arc<Releases>,
    /// Measured loads: reports written by the server, lease readings by the
    /// controller, which reads the estimates.
    pub loads: Arc<Loads>,
    /// The CA consumers trust, set by the server's TLS setup.
    pub ca: Arc<watch::Sender<Option<Arc<str>>>>,
    /// What the directory and releases ask the controller to reconcile.
    pub requests: ReconcileRequests,
}

impl Default for EndpointState {
    /// A state whose directory and releases ask for reconciles on one
    /// [`ReconcileRequests`], which every controller on it listens to.
    fn default() -> Self {
        let requests = ReconcileRequests::default();
        Self {
            directory: Arc::new(Directory::new(requests.clone())),
            releases: Arc::new(Releases::new(requests.clone())),
            loads: Arc::new(Loads::default()),
            ca: Arc::new(watch::channel(None).0),
            requests,
        }
    }
}
