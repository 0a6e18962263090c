//! Least privilege on the real control plane: the operator's ServiceAccount,
//! with the RBAC and the admission policy of `deploy/install.yaml`, writes
//! what shardring writes and nothing else.
//!
//! 1. `shardring run` authenticates with a token of that ServiceAccount (as
//!    in its pod) and publishes a static group: the document, both pods'
//!    annotations, the group's status and the endpoint's CA ConfigMap, all
//!    through the policy.
//! 2. What it owns it keeps true: the CA ConfigMap deleted, or edited, and
//!    the document's ConfigMap deleted, are written back; the namespace
//!    deleted and created again with the same name gets its CA ConfigMap
//!    again (the operator remembered namespaces it had written and never
//!    looked again).
//! 3. A corpus of writes it must not make, each sent with that token, is
//!    denied, every one by the layer named beside it (the policy's message,
//!    or RBAC where it grants no such verb), and the leader label is
//!    accepted only on the pod a token is bound to.
//!
//! Without a cluster it prints `SKIPPED: ...` and passes.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::{Value, json};
use shardring_crds::{CONTROLLER_CLASS_LABEL, ConsumerPool, ShardGroup};
use shardring_devkit::{access, fixtures};
use shardring_e2e::account;
use shardring_e2e::harness::CONTROLLER_CLASS;
use shardring_e2e::namespace::{apply_crds, create_namespace};
use shardring_e2e::published::assignment_document;

use crate::kit_group::{
    Running, TestResult, in_fresh_namespace, operator_pod, ready_pod, shardring_run_command,
    wait_until,
};

/// The operator's namespace and ServiceAccount in `deploy/install.yaml`.
const HOME: &str = access::OPERATOR_NAMESPACE;
const CA: &str = "shardring-endpoint-ca";
pub(crate) const GROUP: &str = "g";
pub(crate) const SHARDS: u32 = 4;
pub(crate) const PODS: [&str; 2] = ["p-0", "p-1"];
const WAIT: Duration = Duration::from_secs(60);
pub(crate) const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
/// What each of the policy's denials starts with.
const POLICY: &str = access::POLICY_REFUSED;

#[tokio::test]
async fn the_operator_account_writes_assignments_and_nothing_else() {
    in_fresh_namespace("least-privilege", "lp", scenario).await;
}

async fn scenario(admin: &Client, namespace: &str) -> TestResult {
    apply_crds(admin).await?;
    install_rbac_and_policy(admin).await?;
    install_group(admin, namespace).await?;
    let operator_token = access::operator_token(admin, None).await?;
    let operator = Running(
        shardring_run_command(namespace, "unused")?
            .env_remove("POD_NAME")
            .env("POD_NAMESPACE", HOME)
            .env("SHARDRING_LEASE_NAME", format!("{namespace}-leader"))
            .env("KUBECONFIG", token_kubeconfig(namespace, &operator_token)?)
            .args([
                "--metrics-addr",
                "127.0.0.1:0",
                "--endpoint-addr",
                "127.0.0.1:0",
            ])
            .spawn()?,
    );
    let sa = token_client(&operator_token).await?;
    wait_until("the policy is in force", WAIT, || {
        policy_in_force(&sa, namespace)
    })
    .await?;

    let published = wait_published(admin, namespace).await?;
    println!(
        "least-privilege: as the ServiceAccount, published epoch {} with {} shards and the CA",
        published, SHARDS
    );
    repairs(admin, namespace).await?;
    recreated_namespace(admin, namespace).await?;
    drop(operator);

    // Thirty-odd requests in one future: on the heap.
    let corpus = Box::pin(corpus(admin, &operator_token, namespace)).await?;
    let denied = corpus.iter().filter(|o| o.denied).count();
    println!(
        "least-privilege: {denied}/{} forbidden writes denied ({} by the policy, {} by RBAC)",
        corpus.len(),
        corpus.iter().filter(|o| o.by == Layer::Policy).count(),
        corpus.iter().filter(|o| o.by == Layer::Rbac).count()
    );
    let wrong: Vec<String> = corpus
        .iter()
        .filter(|o| !o.denied || !o.as_expected)
        .map(|o| format!("{}: {}", o.what, o.seen))
        .collect();
    assert!(
        wrong.is_empty(),
        "writes not denied as expected:\n{}",
        wrong.join("\n")
    );
    assert!(
        corpus.len() >= 20,
        "the corpus has {} attempts",
        corpus.len()
    );
    leader_label_only_on_the_bound_pod(admin).await
}

/// The objects of `deploy/install.yaml` that decide what the operator may
/// do, applied as they ship (the Deployment is not: the test runs the
/// operator itself).
async fn install_rbac_and_policy(admin: &Client) -> TestResult {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/install.yaml");
    access::apply_access(admin, &std::fs::read_to_string(&path)?, "shardring-e2e").await?;
    Ok(())
}

/// `namespace` with pool `p` of the Ready pods [`PODS`] and static group
/// [`GROUP`] of [`SHARDS`] partitions (of the kit tests' controller class),
/// its `spec.output` set to `output` when given.
pub(crate) async fn install_pool_and_group(
    admin: &Client,
    namespace: &str,
    output: Option<Value>,
) -> TestResult {
    create_namespace(admin, namespace).await?;
    let pool: ConsumerPool = serde_json::from_value(fixtures::pool(namespace, "p", "consumer"))?;
    Api::<ConsumerPool>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &pool)
        .await?;
    let since = jiff::Timestamp::now().to_string();
    for pod in PODS {
        ready_pod(admin, namespace, pod, "consumer", &since, IP).await?;
    }
    let mut group = fixtures::static_group(namespace, GROUP, "p", SHARDS);
    group["metadata"]["labels"] = json!({ CONTROLLER_CLASS_LABEL: CONTROLLER_CLASS });
    if let Some(output) = output {
        group["spec"]["output"] = output;
    }
    Api::<ShardGroup>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &serde_json::from_value(group)?)
        .await?;
    Ok(())
}

/// [`install_pool_and_group`], a pod of another application (`web`,
/// labelled and annotated) and its ConfigMap.
async fn install_group(admin: &Client, namespace: &str) -> TestResult {
    install_pool_and_group(admin, namespace, None).await?;
    let mut web: Pod = serde_json::from_value(fixtures::gated_pod(namespace, "web", "web"))?;
    web.annotations_mut()
        .insert("example.com/owner".into(), "web-team".into());
    Api::<Pod>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &web)
        .await?;
    let config: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "web-config", "namespace": namespace},
        "data": {"listen": ":8080"},
    }))?;
    Api::<ConfigMap>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &config)
        .await?;
    Ok(())
}

/// The suite's kubeconfig with every user replaced by `token`.
pub(crate) fn token_kubeconfig(namespace: &str, token: &str) -> TestResult<PathBuf> {
    Ok(account::token_kubeconfig(None, namespace, token)?)
}

/// A client of the suite's cluster that authenticates with `token` only.
pub(crate) async fn token_client(token: &str) -> TestResult<Client> {
    Ok(Client::try_from(access::with_token(
        Config::infer().await?,
        token,
    ))?)
}

/// Whether the policy already denies the operator an annotation on `web`
/// (an API server starts enforcing a new policy within a second or so).
/// Each probe writes a new value: the policy judges what a write changes,
/// so once a probe got through before the policy was in force, the same
/// value again would change nothing and pass forever.
async fn policy_in_force(sa: &Client, namespace: &str) -> Result<(), String> {
    let value = jiff::Timestamp::now().as_nanosecond().to_string();
    let patch = json!({"metadata": {"annotations": {"example.com/probe": value}}});
    match Api::<Pod>::namespaced(sa.clone(), namespace)
        .patch("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(status)) if status.message.contains(POLICY) => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

/// Waits for the document, both annotations and the CA ConfigMap (owned by
/// the group); the document's epoch.
async fn wait_published(admin: &Client, namespace: &str) -> TestResult<u64> {
    let pods = Api::<Pod>::namespaced(admin.clone(), namespace);
    let maps = Api::<ConfigMap>::namespaced(admin.clone(), namespace);
    let key = format!("assignment.shardring.io/{GROUP}");
    wait_until("the document, both annotations and the CA", WAIT, || {
        let (pods, maps, key) = (pods.clone(), maps.clone(), key.clone());
        async move {
            let doc = document(&maps).await?;
            if doc.shards.len() != SHARDS as usize {
                return Err(format!("{} shards", doc.shards.len()));
            }
            for pod in PODS {
                let pod = pods.get(pod).await.map_err(|e| e.to_string())?;
                if !pod.annotations().contains_key(&key) {
                    return Err(format!("{} has no annotation", pod.name_any()));
                }
            }
            ca_owned_by_group(&maps).await?;
            Ok(doc.epoch)
        }
    })
    .await
}

/// The group's published document.
async fn document(maps: &Api<ConfigMap>) -> Result<shardring_crds::AssignmentDocument, String> {
    let map = maps
        .get_opt(&format!("{GROUP}-assignment"))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no document yet")?;
    assignment_document(&map).map_err(|e| e.to_string())
}

/// The CA ConfigMap holds a PEM certificate and is owned by the group.
async fn ca_owned_by_group(maps: &Api<ConfigMap>) -> Result<(), String> {
    let ca = maps
        .get_opt(CA)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no CA ConfigMap")?;
    let pem = ca
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .cloned()
        .unwrap_or_default();
    if !pem.starts_with("-----BEGIN CERTIFICATE-----") {
        return Err(format!("ca.crt is {pem:?}"));
    }
    if !ca
        .owner_references()
        .iter()
        .any(|r| r.kind == "ShardGroup" && r.name == GROUP)
    {
        return Err(format!("owners {:?}", ca.owner_references()));
    }
    Ok(())
}

/// The CA ConfigMap deleted, then edited, and the document deleted: each is
/// written back by the operator.
async fn repairs(admin: &Client, namespace: &str) -> TestResult {
    let maps = Api::<ConfigMap>::namespaced(admin.clone(), namespace);
    maps.delete(CA, &DeleteParams::default()).await?;
    wait_until("the deleted CA ConfigMap written back", WAIT, || {
        let maps = maps.clone();
        async move { ca_owned_by_group(&maps).await }
    })
    .await?;
    let edit = json!({"data": {"ca.crt": "not a certificate"}});
    maps.patch(CA, &PatchParams::default(), &Patch::Merge(&edit))
        .await?;
    wait_until("the edited CA ConfigMap written back", WAIT, || {
        let maps = maps.clone();
        async move { ca_owned_by_group(&maps).await }
    })
    .await?;
    maps.delete(&format!("{GROUP}-assignment"), &DeleteParams::default())
        .await?;
    wait_until("the deleted document written back", WAIT, || {
        let maps = maps.clone();
        async move {
            match document(&maps).await {
                Ok(doc) if doc.shards.len() == SHARDS as usize => Ok(()),
                Ok(doc) => Err(format!("{} shards", doc.shards.len())),
                Err(error) => Err(error),
            }
        }
    })
    .await?;
    println!(
        "least-privilege: the CA ConfigMap (deleted, edited) and the document (deleted) written back"
    );
    Ok(())
}

/// The namespace deleted (the operator finalizes its group) and created
/// again with the same name and group: the new namespace gets the CA.
async fn recreated_namespace(admin: &Client, namespace: &str) -> TestResult {
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone());
    namespaces
        .delete(namespace, &DeleteParams::default())
        .await?;
    wait_until("the namespace gone", Duration::from_secs(120), || {
        let namespaces = namespaces.clone();
        let name = namespace.to_owned();
        async move {
            match namespaces.get_opt(&name).await {
                Ok(None) => Ok(()),
                other => Err(format!("{:?}", other.map(|n| n.map(|n| n.status)))),
            }
        }
    })
    .await?;
    install_group(admin, namespace).await?;
    wait_published(admin, namespace).await?;
    println!("least-privilege: the namespace deleted and created again got its CA ConfigMap");
    Ok(())
}

/// Which layer must refuse an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// The admission policy (its message).
    Policy,
    /// RBAC (no such verb or resource granted).
    Rbac,
}

/// One attempt of the corpus and what came of it.
struct Outcome {
    what: &'static str,
    denied: bool,
    by: Layer,
    as_expected: bool,
    seen: String,
}

fn judge<T: std::fmt::Debug>(
    what: &'static str,
    by: Layer,
    result: Result<T, kube::Error>,
) -> Outcome {
    let (denied, as_expected, seen) = match &result {
        Err(kube::Error::Api(status)) => {
            let policy = status.message.contains(POLICY);
            let rbac = status.code == 403 && status.message.contains("cannot");
            let matches = match by {
                Layer::Policy => policy,
                Layer::Rbac => rbac,
            };
            (
                status.code == 403 || status.code == 422,
                matches,
                status.message.clone(),
            )
        }
        other => (false, false, format!("{other:?}")),
    };
    Outcome {
        what,
        denied,
        by,
        as_expected,
        seen,
    }
}

/// The writes the operator's token must not make, each sent with it.
async fn corpus(admin: &Client, token: &str, namespace: &str) -> TestResult<Vec<Outcome>> {
    use Layer::{Policy, Rbac};
    let sa = &token_client(token).await?;
    let merge = |v: Value| Patch::Merge(v);
    let pp = PatchParams::default();
    let pods = Api::<Pod>::namespaced(sa.clone(), namespace);
    let maps = Api::<ConfigMap>::namespaced(sa.clone(), namespace);
    let system_maps = Api::<ConfigMap>::namespaced(sa.clone(), "kube-system");
    let groups = Api::<ShardGroup>::namespaced(sa.clone(), namespace);
    let pools = Api::<ConsumerPool>::namespaced(sa.clone(), namespace);
    let secrets = Api::<Secret>::namespaced(sa.clone(), namespace);
    let home_secrets = Api::<Secret>::namespaced(sa.clone(), HOME);
    let group_uid = Api::<ShardGroup>::namespaced(admin.clone(), namespace)
        .get(GROUP)
        .await?
        .uid()
        .unwrap_or_default();
    // Another party's key in the group's own document.
    Api::<ConfigMap>::namespaced(admin.clone(), namespace)
        .patch(
            &format!("{GROUP}-assignment"),
            &pp,
            &merge(json!({"data": {"notes": "kept by the platform team"}})),
        )
        .await?;
    let document = format!("{GROUP}-assignment");
    let owned_by_group = |name: &str, labels: Value| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "ownerReferences": [{
                "apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup",
                "name": GROUP, "uid": group_uid, "controller": true,
            }]},
            "data": {"assignment.json": "{}"},
        }))
        .expect("a ConfigMap")
    };
    let ours =
        json!({"app.kubernetes.io/managed-by": "shardring", "shardring.io/shard-group": GROUP});
    let mut impersonating = access::with_token(Config::infer().await?, token);
    impersonating.auth_info.impersonate = Some("system:admin".into());
    let impersonated = Client::try_from(impersonating)?;

    let mut outcomes = vec![
        judge("relabel another application's pod (app=attacker)", Policy,
            pods.patch("web", &pp, &merge(json!({"metadata": {"labels": {"app": "attacker"}}}))).await),
        judge("replace a pod's container image", Policy,
            pods.patch("web", &pp, &Patch::Strategic(json!({"spec": {"containers": [{"name": "consumer", "image": "attacker/x:1"}]}}))).await),
        judge("replace a consumer pod's image (a pod the operator annotates)", Policy,
            pods.patch(PODS[0], &pp, &Patch::Strategic(json!({"spec": {"containers": [{"name": "consumer", "image": "attacker/x:1"}]}}))).await),
        judge("add a toleration to a pod", Policy,
            pods.patch("web", &pp, &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "add", "path": "/spec/tolerations/-", "value": {"operator": "Exists"}}]))?)).await),
        judge("set a pod's activeDeadlineSeconds", Policy,
            pods.patch("web", &pp, &merge(json!({"spec": {"activeDeadlineSeconds": 1}}))).await),
        judge("add another annotation to a pod", Policy,
            pods.patch("web", &pp, &merge(json!({"metadata": {"annotations": {"prometheus.io/scrape": "true"}}}))).await),
        judge("remove another party's annotation from a pod", Policy,
            pods.patch("web", &pp, &merge(json!({"metadata": {"annotations": {"example.com/owner": null}}}))).await),
        judge("add a finalizer to a pod", Policy,
            pods.patch("web", &pp, &merge(json!({"metadata": {"finalizers": ["attacker.example/hold"]}}))).await),
        judge("add an owner reference to a pod", Policy,
            pods.patch("web", &pp, &merge(json!({"metadata": {"ownerReferences": [{
                "apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup", "name": GROUP, "uid": group_uid}]}}))).await),
        judge("set the endpoint-leader label on a consumer pod", Policy,
            pods.patch(PODS[0], &pp, &merge(json!({"metadata": {"labels": {"shardring.io/endpoint-leader": "true"}}}))).await),
        judge("rewrite another application's ConfigMap", Policy,
            maps.patch("web-config", &pp, &merge(json!({"data": {"listen": ":1"}}))).await),
        judge("take over another application's ConfigMap with shardring's labels", Policy,
            maps.patch("web-config", &pp, &merge(json!({"metadata": {"labels": ours.clone()}}))).await),
        judge("patch kube-root-ca.crt", Policy,
            maps.patch("kube-root-ca.crt", &pp, &merge(json!({"data": {"ca.crt": "x"}}))).await),
        judge("patch kube-root-ca.crt in kube-system", Policy,
            system_maps.patch("kube-root-ca.crt", &pp, &merge(json!({"data": {"ca.crt": "x"}}))).await),
        judge("create a ConfigMap in kube-system", Policy,
            system_maps.create(&PostParams::default(), &owned_by_group("evil", ours.clone())).await),
        judge("create a ConfigMap without shardring's labels", Policy,
            maps.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "plain"}, "data": {"a": "b"}}))?).await),
        judge("create a ConfigMap with the group label but no owner reference", Policy,
            maps.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "forged-assignment", "labels": ours.clone()}}))?).await),
        judge("write a CA ConfigMap that holds no certificate", Policy,
            maps.patch(CA, &PatchParams::apply("shardring").force(), &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": CA, "labels": {"app.kubernetes.io/managed-by": "shardring"}},
                "data": {"ca.crt": "attacker"}}))).await),
        judge("change another party's key in a group's document", Policy,
            maps.patch(&document, &pp, &merge(json!({"data": {"notes": "overwritten"}}))).await),
        judge("add a label to a group's document", Policy,
            maps.patch(&document, &pp, &merge(json!({"metadata": {"labels": {"app": "attacker"}}}))).await),
        judge("drop the owner reference of a group's document", Policy,
            maps.patch(&document, &pp, &merge(json!({"metadata": {"ownerReferences": null}}))).await),
        judge("change a ShardGroup's spec", Policy,
            groups.patch(GROUP, &pp, &merge(json!({"spec": {"standbys": 3}}))).await),
        judge("add another finalizer to a ShardGroup", Policy,
            groups.patch(GROUP, &pp, &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "add", "path": "/metadata/finalizers/-", "value": "attacker.example/hold"}]))?)).await),
        judge("create a Secret other than the endpoint's CA in the operator's namespace", Policy,
            home_secrets.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "attacker"}, "stringData": {"k": "v"}}))?).await),
        judge("delete a pod", Rbac, pods.delete("web", &DeleteParams::default()).await.map(drop)),
        judge("delete a ConfigMap", Rbac, maps.delete("web-config", &DeleteParams::default()).await.map(drop)),
        judge("create a pod", Rbac,
            pods.create(&PostParams::default(), &serde_json::from_value(fixtures::gated_pod(namespace, "attacker", "web"))?).await),
        judge("add an ephemeral container to a pod", Rbac,
            pods.patch_subresource("ephemeralcontainers", "web", &pp, &merge(json!({"spec": {"ephemeralContainers": [
                {"name": "debug", "image": "attacker/x:1"}]}}))).await),
        judge("write a pod's status", Rbac,
            pods.patch_status("web", &pp, &merge(json!({"status": {"phase": "Failed"}}))).await),
        judge("change a ConsumerPool", Rbac,
            pools.patch("p", &pp, &merge(json!({"spec": {"minReadySeconds": 600}}))).await),
        judge("read a Secret", Rbac, secrets.list(&Default::default()).await.map(drop)),
        // Its own namespace's Secrets: `get` only of the names its Roles
        // list (its CA, a RabbitMQ source's credentials), no list.
        judge("list the Secrets of its own namespace", Rbac,
            home_secrets.list(&Default::default()).await.map(drop)),
        judge("get a Secret of its own namespace its Roles do not name", Rbac,
            home_secrets.get("attacker").await.map(drop)),
        judge("create a Secret in a consumer namespace", Rbac,
            secrets.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "attacker"}}))?).await),
        judge("impersonate system:admin", Rbac,
            Api::<ConfigMap>::namespaced(impersonated, namespace).list(&Default::default()).await.map(drop)),
    ];
    outcomes.push(judge(
        "create a ConfigMap owned by the group without shardring's labels",
        Policy,
        maps.create(
            &PostParams::default(),
            &owned_by_group("unlabelled", json!({})),
        )
        .await,
    ));
    Ok(outcomes)
}

/// The leader label may be set (to "true") and removed only on the pod the
/// token is bound to, in the operator's namespace: a token bound to
/// `operator-0` labels it, but not `operator-1`, and not with another value.
async fn leader_label_only_on_the_bound_pod(admin: &Client) -> TestResult {
    let pods = Api::<Pod>::namespaced(admin.clone(), HOME);
    let mut uids = Vec::new();
    for name in ["lp-operator-0", "lp-operator-1"] {
        let _ = pods
            .delete(name, &DeleteParams::default().grace_period(0))
            .await;
        wait_until("an earlier run's pod gone", WAIT, || {
            let pods = pods.clone();
            async move {
                match pods.get_opt(name).await {
                    Ok(None) => Ok(()),
                    other => Err(format!("{:?}", other.map(|p| p.map(|p| p.name_any())))),
                }
            }
        })
        .await?;
        let pod: Pod = serde_json::from_value(operator_pod(HOME, name))?;
        uids.push(
            pods.create(&PostParams::default(), &pod)
                .await?
                .uid()
                .unwrap_or_default(),
        );
    }
    let bound =
        token_client(&access::operator_token(admin, Some(("lp-operator-0", &uids[0]))).await?)
            .await?;
    let as_bound = Api::<Pod>::namespaced(bound, HOME);
    let label = |value: Value| {
        Patch::Merge(json!({"metadata": {"labels": {"shardring.io/endpoint-leader": value}}}))
    };
    let pp = PatchParams::default();
    as_bound
        .patch("lp-operator-0", &pp, &label(json!("true")))
        .await?;
    as_bound
        .patch("lp-operator-0", &pp, &label(Value::Null))
        .await?;
    let other = judge(
        "label a peer's pod as leader",
        Layer::Policy,
        as_bound
            .patch("lp-operator-1", &pp, &label(json!("true")))
            .await,
    );
    let value = judge(
        "set the leader label to another value",
        Layer::Policy,
        as_bound
            .patch("lp-operator-0", &pp, &label(json!("yes")))
            .await,
    );
    for pod in ["lp-operator-0", "lp-operator-1"] {
        pods.delete(pod, &DeleteParams::default().grace_period(0))
            .await?;
    }
    for outcome in [other, value] {
        assert!(
            outcome.denied && outcome.as_expected,
            "{}: {}",
            outcome.what,
            outcome.seen
        );
    }
    println!("least-privilege: the leader label is accepted on the token's own pod only");
    Ok(())
}
