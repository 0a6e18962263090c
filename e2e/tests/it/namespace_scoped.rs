//! A namespace-scoped install on the real control plane: the chart rendered
//! by helm for a release of its own with `watchNamespaces` (two namespaces)
//! and `rbac.podAnnotations=false`, its RBAC and admission policy applied as
//! rendered, and `shardring run` watching those two namespaces with a token
//! of that release's ServiceAccount.
//!
//! 1. It publishes the group of each watched namespace (its groups set
//!    `spec.output.podAnnotations: false`): the document and the status,
//!    and no pod annotation; the two namespaces' watches are merged into
//!    one controller.
//! 2. A namespace it does not watch is left alone: its group (of the same
//!    controller class) gets no document and no status.
//! 3. RBAC holds it to that: the account may not create a ConfigMap in the
//!    unwatched namespace, nor patch a pod in a watched one.
//!
//! Needs helm (`$HELM`, else `helm` on PATH; `./scripts/test.sh` installs
//! one). Without a cluster it prints `SKIPPED: ...` and passes.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use shardring_crds::ShardGroup;
use shardring_devkit::access;
use shardring_e2e::namespace::{apply_crds, delete_namespace};
use shardring_e2e::published::assignment_document;

use crate::kit_group::{
    Running, TestResult, in_fresh_namespace, shardring_run_command, wait_until,
};
use crate::least_privilege::{
    GROUP, PODS, SHARDS, install_pool_and_group, token_client, token_kubeconfig,
};

/// The release the chart is rendered for: its objects are named after it,
/// so they stand beside `deploy/install.yaml`'s (another test's).
const RELEASE: &str = "e2e-scoped";
const ACCOUNT: &str = "e2e-scoped-shardring";
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_namespace_scoped_install_serves_its_namespaces_only() {
    in_fresh_namespace("namespace-scoped", "ns-scope", scenario).await;
}

async fn scenario(admin: &Client, first: &str) -> TestResult {
    let second = format!("{first}-b");
    let unwatched = format!("{first}-c");
    let result = Box::pin(run(admin, first, &second, &unwatched)).await;
    for namespace in [&second, &unwatched] {
        if let Err(error) = delete_namespace(admin, namespace).await {
            eprintln!("namespace-scoped: could not delete {namespace}: {error}");
        }
    }
    result
}

async fn run(admin: &Client, first: &str, second: &str, unwatched: &str) -> TestResult {
    apply_crds(admin).await?;
    for namespace in [first, second, unwatched] {
        install_pool_and_group(admin, namespace, Some(json!({"podAnnotations": false}))).await?;
    }
    ensure_operator_namespace(admin).await?;
    let chart = render_chart(&[first, second])?;
    access::apply_access(admin, &chart, "shardring-e2e-scoped").await?;
    let token = access::account_token(admin, ACCOUNT, None).await?;
    // `--namespace first` (as every kit test runs it) and
    // `--watch-namespaces second`: both count, as the chart's one flag would.
    let _operator = Running(
        shardring_run_command(first, "unused")?
            .env_remove("POD_NAME")
            .env("POD_NAMESPACE", access::OPERATOR_NAMESPACE)
            .env("SHARDRING_LEASE_NAME", format!("{first}-leader"))
            .env("KUBECONFIG", token_kubeconfig(first, &token)?)
            .args(["--watch-namespaces", second])
            .args(["--metrics-addr", "127.0.0.1:0", "--no-endpoint"])
            .spawn()?,
    );
    let mut epochs = Vec::new();
    for namespace in [first, second] {
        let epoch = wait_published(admin, namespace).await?;
        println!("namespace-scoped: {namespace} published at epoch {epoch}, no pod annotation");
        epochs.push(epoch);
    }
    written_back_as_it_was(admin, first, epochs[0]).await?;
    // The watched groups are published and Ready: by now the unwatched one
    // would have been too.
    let groups = Api::<ShardGroup>::namespaced(admin.clone(), unwatched);
    let group = groups.get(GROUP).await?;
    assert!(
        group.status.is_none(),
        "the unwatched namespace's group has a status: {:?}",
        group.status
    );
    let maps = Api::<ConfigMap>::namespaced(admin.clone(), unwatched);
    assert!(
        maps.get_opt(&format!("{GROUP}-assignment"))
            .await?
            .is_none(),
        "the unwatched namespace's group has a document"
    );
    println!("namespace-scoped: {unwatched} (not watched) has no document and no status");

    let sa = token_client(&token).await?;
    let create = Api::<ConfigMap>::namespaced(sa.clone(), unwatched)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {}}))?,
        )
        .await;
    assert_forbidden("create a ConfigMap in the unwatched namespace", create)?;
    let patch = json!({"metadata": {"annotations": {"assignment.shardring.io/g": "{}"}}});
    let patched = Api::<Pod>::namespaced(sa, first)
        .patch(PODS[0], &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    assert_forbidden("patch a pod without rbac.podAnnotations", patched)?;
    println!("namespace-scoped: RBAC denied a ConfigMap outside and a pod patch inside");
    Ok(())
}

/// The chart for [`RELEASE`] in the operator's namespace, watching
/// `namespaces`, without Pod patch.
fn render_chart(namespaces: &[&str]) -> TestResult<String> {
    let helm = std::env::var("HELM").unwrap_or_else(|_| "helm".into());
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/helm/shardring");
    let output = Command::new(&helm)
        .args([
            "template",
            RELEASE,
            chart,
            "--namespace",
            access::OPERATOR_NAMESPACE,
        ])
        .args([
            "--set",
            &format!("watchNamespaces={{{}}}", namespaces.join(",")),
        ])
        .args(["--set", "rbac.podAnnotations=false"])
        .output()
        .map_err(|error| {
            format!(
                "cannot run `{helm}` ({error}): this test needs helm 3 in $HELM or on PATH; \
                 ./scripts/test.sh installs one"
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "helm template failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// The operator's namespace, which a chart's release is installed into (it
/// renders no Namespace); another test may have created it already.
async fn ensure_operator_namespace(admin: &Client) -> TestResult {
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": access::OPERATOR_NAMESPACE}
    }))?;
    match Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Waits for `namespace`'s document (every shard active) and status; no pod
/// carries an annotation. The document's epoch.
async fn wait_published(admin: &Client, namespace: &str) -> TestResult<u64> {
    let maps = Api::<ConfigMap>::namespaced(admin.clone(), namespace);
    let groups = Api::<ShardGroup>::namespaced(admin.clone(), namespace);
    let epoch = wait_until("the document and the status", WAIT, || {
        let (maps, groups) = (maps.clone(), groups.clone());
        async move {
            let map = maps
                .get_opt(&format!("{GROUP}-assignment"))
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no document yet")?;
            let doc = assignment_document(&map).map_err(|e| e.to_string())?;
            let active = doc.pods.values().map(|p| p.active.len()).sum::<usize>();
            if active != SHARDS as usize {
                return Err(format!("{active} shards active"));
            }
            let group = groups.get(GROUP).await.map_err(|e| e.to_string())?;
            let status_epoch = group.status.map_or(0, |s| s.epoch);
            if status_epoch != doc.epoch {
                return Err(format!("status at epoch {status_epoch}"));
            }
            Ok(doc.epoch)
        }
    })
    .await?;
    let pods = Api::<Pod>::namespaced(admin.clone(), namespace);
    for pod in PODS {
        let pod = pods.get(pod).await?;
        let annotated: Vec<&String> = pod
            .annotations()
            .keys()
            .filter(|k| k.starts_with("assignment.shardring.io/"))
            .collect();
        assert!(
            annotated.is_empty(),
            "{} carries {annotated:?}",
            pod.name_any()
        );
    }
    Ok(epoch)
}

/// The document of `namespace`'s group (published at `epoch`) deleted: with
/// no pod annotation to rebuild it from, the operator writes back the one
/// it held, at a newer epoch, every shard still active on the same pod
/// (not revoked from an unknown reader).
async fn written_back_as_it_was(admin: &Client, namespace: &str, epoch: u64) -> TestResult {
    let maps = Api::<ConfigMap>::namespaced(admin.clone(), namespace);
    let name = format!("{GROUP}-assignment");
    let owners =
        |doc: &shardring_crds::AssignmentDocument| -> Vec<(String, Option<String>, String)> {
            doc.shards
                .iter()
                .map(|(id, r)| (id.clone(), r.owner.clone(), format!("{:?}", r.state)))
                .collect()
        };
    let before = owners(&assignment_document(&maps.get(&name).await?)?);
    maps.delete(&name, &Default::default()).await?;
    let after = wait_until("the deleted document written back", WAIT, || {
        let (maps, name) = (maps.clone(), name.clone());
        async move {
            let map = maps
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("not written back yet")?;
            let doc = assignment_document(&map).map_err(|e| e.to_string())?;
            if doc.epoch <= epoch {
                return Err(format!("epoch {}", doc.epoch));
            }
            Ok(doc)
        }
    })
    .await?;
    assert_eq!(
        owners(&after),
        before,
        "the document written back as it was"
    );
    println!(
        "namespace-scoped: {namespace}'s deleted document written back at epoch {} as it was",
        after.epoch
    );
    Ok(())
}

fn assert_forbidden<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> TestResult {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(()),
        other => Err(format!("{what}: expected 403 Forbidden, got {other:?}").into()),
    }
}
