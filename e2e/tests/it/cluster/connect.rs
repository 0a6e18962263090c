//! `connect` against the devkit's mock API server, in a process of its own:
//! the suite's client reaches an API server over TLS even where nothing
//! installed a rustls crypto provider first.

use shardring_devkit::process::in_own_process;
use shardring_e2e::Reachability;

/// `connect` builds its client over TLS as it does for any real cluster: a
/// process that has not installed a rustls crypto provider must still reach
/// the API server. In a process of its own: other tests of this binary
/// install one.
#[tokio::test]
async fn connect_reaches_an_api_server_over_tls() {
    if !in_own_process(module_path!(), "connect_reaches_an_api_server_over_tls") {
        return;
    }
    let mock = shardring_devkit::apiserver::MockApiServer::start(Default::default()).await;
    match shardring_e2e::cluster::connect_with(mock.kube_config().await).await {
        Reachability::Reachable { version, .. } => {
            assert!(version.contains("shardring-mock"), "{version}")
        }
        Reachability::Unreachable(reason) => panic!("the TLS API server was not reached: {reason}"),
    }
}
