//! What the operator-runtime tests on the real cluster start from: the CRDs,
//! a fresh namespace, a ConsumerPool `p` selecting `app=consumer`, a static
//! ShardGroup `g` served by the suite's controller class, and Ready pods
//! that are never scheduled (a scheduling gate), marked Ready through the
//! status subresource as a kubelet would, with a pod IP. The objects are the
//! devkit's fixtures, the same the mock tests put on the mock.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use shardring_crds::{CONTROLLER_CLASS_LABEL, ConsumerPool, ShardGroup};
use shardring_devkit::access;
use shardring_devkit::fixtures;
use shardring_devkit::wait::{Probe, wait_for_every};
use shardring_e2e::account::{self, Identity};
use shardring_e2e::cluster::{Cluster, cluster_or_skip};
use shardring_e2e::harness::CONTROLLER_CLASS;
use shardring_e2e::namespace::{apply_crds, create_namespace, delete_namespace, unique_namespace};
use shardring_e2e::operator::{OperatorError, binary_path};
use shardring_e2e::published::assignment_document;

pub(crate) type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The group's ShardGroup, pool and the label value its pods carry.
pub(crate) const GROUP: &str = "g";
const POOL: &str = "p";
const APP: &str = "consumer";

/// Runs `scenario` in a fresh namespace `sr-e2e-<prefix>-<random>` of the
/// cluster under test (or prints `SKIPPED: ...` and returns), taking the
/// suite's and the kit's turns as every real-cluster test does, and deletes
/// the namespace afterwards, also after a failure.
pub(crate) async fn in_fresh_namespace(
    test: &str,
    prefix: &str,
    scenario: impl AsyncFnOnce(&Client, &str) -> TestResult,
) {
    let _turn = crate::TURNS.read().await;
    let _kit_turn = shardring_e2e::kit::KitTurn::shared().await;
    let Some(client) = cluster_or_skip(test).await else {
        return;
    };
    let namespace = unique_namespace(prefix);
    let result = scenario(&client, &namespace).await;
    let cleanup = delete_namespace(&client, &namespace).await;
    if let Err(error) = result {
        panic!("{test} in namespace {namespace}: {error}");
    }
    cleanup.unwrap_or_else(|error| panic!("cleanup of namespace {namespace}: {error}"));
}

/// A child process, killed when dropped.
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free at the moment.
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `shardring run` for `namespace` as pod `pod` of that namespace (its
/// Lease and Secrets live there too), serving the suite's controller class,
/// with no node watch and its log on the test's output, authenticating as
/// the environment's kubeconfig says; the caller adds the ports and flags of
/// its case and spawns it. Fails naming the binary when it is not built.
/// The tests that set up an identity of their own start from this one;
/// every other starts from [`shardring_run`].
pub(crate) fn shardring_run_command(namespace: &str, pod: &str) -> TestResult<Command> {
    let path = binary_path()?;
    if !path.is_file() {
        return Err(OperatorError::MissingBinary(path).into());
    }
    let mut command = Command::new(path);
    command
        .args([
            "run",
            "--namespace",
            namespace,
            "--controller-class",
            CONTROLLER_CLASS,
        ])
        .args(["--no-node-watch", "--log-filter", "info"])
        .env("POD_NAME", pod)
        .env("POD_NAMESPACE", namespace)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        // Its log (on stdout) shows with --nocapture.
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    Ok(command)
}

/// [`shardring_run_command`] as the installed operator runs: as its
/// ServiceAccount under the install's RBAC and admission policy (a token
/// bound to `bound`, a pod's name and uid in the operator's namespace, when
/// given), calling the operator's namespace its own (its Lease there is
/// named after the test's namespace: see [`lease_of`]), unless
/// `SHARDRING_E2E_OPERATOR_IDENTITY=admin` (then as the suite's user, at
/// home in the test's namespace). `pod` is its leader identity either way.
pub(crate) async fn shardring_run(
    admin: &Client,
    namespace: &str,
    pod: &str,
    bound: Option<(&str, &str)>,
) -> TestResult<Command> {
    let mut command = shardring_run_command(namespace, pod)?;
    let (lease, home) = lease_of(namespace)?;
    command.env("SHARDRING_LEASE_NAME", lease);
    let base = Cluster::from_environment(admin.clone());
    let cluster = account::operator_cluster(&base, admin, namespace, bound).await?;
    if let Some(kubeconfig) = &cluster.kubeconfig {
        command
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAMESPACE", home);
    }
    Ok(command)
}

/// [`shardring_run`] started as `operator-0` with its metrics on a free
/// loopback port and its endpoint on another; the process and that port.
pub(crate) async fn start_operator(client: &Client, namespace: &str) -> TestResult<(Running, u16)> {
    let metrics_port = free_port()?;
    let operator = Running(
        shardring_run(client, namespace, "operator-0", None)
            .await?
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args(["--endpoint-addr", "127.0.0.1:0"])
            .spawn()?,
    );
    Ok((operator, metrics_port))
}

/// The leader Lease of [`shardring_run`]'s operator for `namespace`: its
/// name and namespace (the operator's home, see [`operator_home`]).
pub(crate) fn lease_of(namespace: &str) -> TestResult<(String, String)> {
    Ok((format!("{namespace}-leader"), operator_home(namespace)?))
}

/// The namespace [`shardring_run`]'s operator for `namespace` calls its own:
/// the account's, else the test's.
pub(crate) fn operator_home(namespace: &str) -> TestResult<String> {
    Ok(match Identity::from_env()? {
        Identity::Account => access::OPERATOR_NAMESPACE.to_owned(),
        Identity::Admin => namespace.to_owned(),
    })
}

/// A never-scheduled stand-in for the operator's own pod `name` in `home`:
/// in the operator's namespace a pod of its ServiceAccount (a token can be
/// bound to it) that meets the `restricted` Pod Security Standard that
/// namespace enforces; elsewhere a plain one.
pub(crate) fn operator_pod(home: &str, name: &str) -> Value {
    if home != access::OPERATOR_NAMESPACE {
        return fixtures::gated_pod(home, name, "shardring");
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": home},
        "spec": {
            "serviceAccountName": access::OPERATOR_ACCOUNT,
            "schedulingGates": [{"name": "shardring.io/never-schedule"}],
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "operator", "image": "shardring:test",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    })
}

/// Installs the CRDs and `namespace` with ConsumerPool `p` selecting
/// `app=consumer`.
async fn namespace_with_pool(client: &Client, namespace: &str) -> TestResult {
    apply_crds(client).await?;
    create_namespace(client, namespace).await?;
    let pool: ConsumerPool = serde_json::from_value(fixtures::pool(namespace, POOL, APP))?;
    Api::<ConsumerPool>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pool)
        .await?;
    Ok(())
}

/// Installs the CRDs, `namespace` with pool `p` and ShardGroup `g` of
/// `shards` static partitions (drain timeout `drain`), and Ready pods
/// `pods` at `ip`; returns each pod's uid.
pub(crate) async fn install(
    client: &Client,
    namespace: &str,
    shards: u32,
    drain: &str,
    pods: &[&str],
    ip: IpAddr,
) -> TestResult<BTreeMap<String, String>> {
    namespace_with_pool(client, namespace).await?;
    let mut group = fixtures::static_group(namespace, GROUP, POOL, shards);
    group["spec"]["handoff"]["drainTimeout"] = json!(drain);
    group["metadata"]["labels"] = json!({ CONTROLLER_CLASS_LABEL: CONTROLLER_CLASS });
    let group: ShardGroup = serde_json::from_value(group)?;
    Api::<ShardGroup>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &group)
        .await?;
    let since = jiff::Timestamp::now().to_string();
    let mut uids = BTreeMap::new();
    for name in pods {
        uids.insert(
            (*name).to_owned(),
            ready_pod(client, namespace, name, APP, &since, ip).await?,
        );
    }
    Ok(uids)
}

/// `GET /metrics` of the operator on loopback port `port`: the body, in
/// the Prometheus text format (the request asks for no OpenMetrics), or
/// what went wrong.
pub(crate) fn scrape_metrics(port: u16) -> Result<String, String> {
    use std::io::{Read as _, Write as _};
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let (_, body) = response
        .split_once("\r\n\r\n")
        .ok_or("no HTTP body in the answer")?;
    Ok(body.to_owned())
}

/// The operator's `shardring_reconciles_total` from its `/metrics` on
/// loopback port `port` (reconciles started so far), or what went wrong.
pub(crate) fn reconciles_total(port: u16) -> Result<f64, String> {
    let text = scrape_metrics(port)?;
    text.lines()
        .find_map(|line| line.strip_prefix("shardring_reconciles_total "))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("no shardring_reconciles_total in /metrics:\n{text}"))
}

/// Creates pod `name` labelled `app=<app>` and marks it Ready at `ip` since
/// `since`; returns its uid.
pub(crate) async fn ready_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    app: &str,
    since: &str,
    ip: IpAddr,
) -> TestResult<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(fixtures::gated_pod(namespace, name, app))?;
    let created = pods.create(&PostParams::default(), &pod).await?;
    set_status(&pods, name, ready_status(since, ip)).await?;
    Ok(created.uid().unwrap_or_default())
}

/// The status of a Ready pod at `ip` (conditions first: `Ready`).
pub(crate) fn ready_status(since: &str, ip: IpAddr) -> Value {
    let mut status = fixtures::ready_status(since)["status"].clone();
    status["podIP"] = json!(ip.to_string());
    status["podIPs"] = json!([{ "ip": ip.to_string() }]);
    status
}

/// Writes `status` through the status subresource, as a kubelet does.
pub(crate) async fn set_status(pods: &Api<Pod>, name: &str, status: Value) -> TestResult {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}

/// Polls `done` every 50 ms until it answers `Ok`, for at most `timeout`;
/// the error names what was awaited and the last thing seen (an `Err` is
/// what was seen instead).
pub(crate) async fn wait_until<T, F>(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> F,
) -> TestResult<T>
where
    F: Future<Output = Result<T, String>>,
{
    let probe = || {
        let seen = done();
        async move {
            Ok::<_, Infallible>(match seen.await {
                Ok(value) => Probe::Done(value),
                Err(last) => Probe::Pending(last),
            })
        }
    };
    Ok(wait_for_every(Duration::from_millis(50), what, timeout, probe).await?)
}

/// Each partition's active owner as the documents showed it, and how many
/// times it changed from one pod to another.
#[derive(Default)]
pub(crate) struct OwnerChanges {
    pub(crate) owner: BTreeMap<String, String>,
    pub(crate) moves: usize,
}

/// Starts [`watch_owners`] on `namespace` and waits until it has seen
/// `shards` partitions in the documents (its first events are the current
/// documents: owner changes count from there); the counts, and the watch
/// to abort when done.
pub(crate) async fn watch_owners_of(
    client: &Client,
    namespace: &str,
    shards: usize,
) -> TestResult<(Arc<Mutex<OwnerChanges>>, tokio::task::JoinHandle<()>)> {
    let owners = Arc::new(Mutex::new(OwnerChanges::default()));
    let watch = tokio::spawn(watch_owners(
        client.clone(),
        namespace.to_owned(),
        Arc::clone(&owners),
    ));
    wait_until("the watch to see every document", WATCH_WAIT, || async {
        let seen = owners.lock().expect("owners").owner.len();
        if seen == shards {
            Ok(())
        } else {
            Err(format!("{seen} partitions seen"))
        }
    })
    .await?;
    Ok((owners, watch))
}

/// The owner changes [`watch_owners`] has counted up to the documents as
/// they are now. A read of a document can be ahead of the watch (the watch
/// delivers it a moment later), so this waits until every active partition
/// of a fresh list of the namespace's documents has the owner the watch
/// last saw; call it once the documents have settled.
pub(crate) async fn moves_up_to_now(
    client: &Client,
    namespace: &str,
    owners: &Mutex<OwnerChanges>,
) -> TestResult<usize> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    wait_until("the document watch to catch up", WATCH_WAIT, || async {
        let listed = config_maps
            .list(&kube::api::ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let owners = owners.lock().expect("owners");
        let behind = listed
            .items
            .iter()
            .filter_map(|map| assignment_document(map).ok())
            .flat_map(|doc| doc.pods.into_iter())
            .flat_map(|(pod, entry)| entry.active.into_iter().map(move |s| (s, pod.clone())))
            .filter(|(shard, pod)| owners.owner.get(shard) != Some(pod))
            .count();
        if behind == 0 {
            Ok(owners.moves)
        } else {
            Err(format!("{behind} partitions not yet seen on their owner"))
        }
    })
    .await
}

/// How long [`watch_owners_of`] waits for the documents.
const WATCH_WAIT: Duration = Duration::from_secs(90);

/// Installs the CRDs, `namespace`, ConsumerPool `p` selecting
/// `app=consumer` and `pods` Ready pods `c-0`, `c-1`, … at `ip`.
pub(crate) async fn pool_of_ready_pods(
    client: &Client,
    namespace: &str,
    pods: usize,
    ip: IpAddr,
) -> TestResult {
    namespace_with_pool(client, namespace).await?;
    let since = jiff::Timestamp::now().to_string();
    for i in 0..pods {
        ready_pod(client, namespace, &format!("c-{i}"), APP, &since, ip).await?;
    }
    Ok(())
}

/// Watches the namespace's documents, counting owner changes into `owners`.
async fn watch_owners(client: Client, namespace: String, owners: Arc<Mutex<OwnerChanges>>) {
    let config_maps = Api::<ConfigMap>::namespaced(client, &namespace);
    // A watch error (an expired watch under load) ends nothing: the
    // watcher relists and carries on, and the relist's objects are
    // compared like any other (an owner change while it was away still
    // counts once).
    let stream = watcher(config_maps, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let Ok(map) = event else {
            continue;
        };
        let Ok(doc) = assignment_document(&map) else {
            continue;
        };
        let mut owners = owners.lock().expect("owners");
        for (pod, entry) in &doc.pods {
            for shard in &entry.active {
                let before = owners.owner.insert(shard.clone(), pod.clone());
                if before.is_some_and(|before| before != *pod) {
                    owners.moves += 1;
                }
            }
        }
    }
}
