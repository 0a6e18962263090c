//! The API server's semantics that the operator's correctness rests on,
//! asserted against the real control plane (the cluster reachable through
//! KUBECONFIG: CI's `../shared/k8s` kit). Where the devkit's mocked API
//! server (which the fault-injection tests use) emulates the same thing,
//! the same assertions run against it too (`on_both!`), so a place where
//! the mock answers unlike the real server fails its half; what the mock
//! does not emulate is checked on the real server only (`real_only!`).
//!
//! Each check takes a client and a fresh namespace. On both:
//! - server-side apply (forced, as every writer here applies): a field the
//!   manager stops sending is removed, a stale `resourceVersion` in the
//!   applied object is a 409;
//! - update with a `resourceVersion` precondition: a stale one is a 409, a
//!   no-op write keeps the version;
//! - JSON patch with a `test` op (the operator's uid precondition on pod
//!   annotation writes): a failed test is a 422 and nothing is applied;
//! - watches with a label selector: an object that stops matching is
//!   DELETED, one that starts matching is ADDED; a watch from a version
//!   resumes after it.
//!
//! On the real server only:
//! - server-side apply's field ownership: managed fields name the manager,
//!   another manager conflicts unless it forces;
//! - delete with a uid precondition: a 409 for another uid;
//! - paged lists: every item once, with continue tokens, at one
//!   resourceVersion (the mock answers a list whole);
//! - set-based label selectors and field selectors.
//!
//! Without a cluster the real half prints `SKIPPED: ...` and passes (fails
//! with `SHARDRING_E2E_REQUIRE_CLUSTER` set, as in CI).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use shardring_devkit::apiserver::{MockApiServer, MockOptions};
use shardring_e2e::cluster::cluster_or_skip;
use shardring_e2e::namespace::{create_namespace, delete_namespace, unique_namespace};

type CheckResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The longest wait for one watch event.
const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `check` in a fresh namespace of the real cluster (or skips) and of
/// the mock.
macro_rules! on_both {
    ($check:ident) => {
        mod $check {
            #[tokio::test]
            async fn real_api_server() {
                super::on_cluster(stringify!($check), super::$check).await;
            }

            #[tokio::test]
            async fn mock_api_server() {
                super::on_mock(stringify!($check), super::$check).await;
            }
        }
    };
}

/// Runs `check` in a fresh namespace of the real cluster (or skips): what
/// the mock does not emulate.
macro_rules! real_only {
    ($check:ident) => {
        mod $check {
            #[tokio::test]
            async fn real_api_server() {
                super::on_cluster(stringify!($check), super::$check).await;
            }
        }
    };
}

on_both!(server_side_apply_removes_what_a_manager_stops_sending);
on_both!(updates_are_conditioned_on_the_resource_version);
on_both!(a_failed_json_patch_test_applies_nothing);
on_both!(label_selected_watches_turn_leaving_into_deleted);
real_only!(server_side_apply_tracks_managers_and_conflicts);
real_only!(deletes_are_conditioned_on_the_uid);
real_only!(paged_lists_return_every_item_once_at_one_version);
real_only!(set_based_and_field_selectors_filter_lists);

async fn on_cluster<F, Fut>(name: &str, check: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = CheckResult>,
{
    let Some(client) = cluster_or_skip(&format!("api_semantics::{name}")).await else {
        return;
    };
    run(client, name, check).await;
}

async fn on_mock<F, Fut>(name: &str, check: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = CheckResult>,
{
    let server = MockApiServer::start(MockOptions::default()).await;
    run(server.client().await, name, check).await;
}

async fn run<F, Fut>(client: Client, name: &str, check: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = CheckResult>,
{
    let namespace = unique_namespace("api");
    create_namespace(&client, &namespace)
        .await
        .expect("create the test's namespace");
    let result = check(client.clone(), namespace.clone()).await;
    let _ = delete_namespace(&client, &namespace).await;
    if let Err(error) = result {
        panic!("{name} in namespace {namespace}: {error}");
    }
}

/// The HTTP code of an API error.
fn code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// A ConfigMap for server-side apply.
fn applied(name: &str, annotations: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "annotations": annotations},
        "data": data,
    })
}

/// The ConfigMap's `data["k"]`.
fn value_of(config_map: &ConfigMap) -> Option<&str> {
    config_map.data.as_ref()?.get("k").map(String::as_str)
}

fn config_map(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        },
        "data": {"k": "v"},
    }))
    .expect("a ConfigMap")
}

async fn server_side_apply_removes_what_a_manager_stops_sending(
    client: Client,
    namespace: String,
) -> CheckResult {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let force = PatchParams::apply("shardring").force();
    let first = api
        .patch(
            "doc",
            &force,
            &Patch::Apply(applied(
                "doc",
                json!({"one": "1", "two": "2"}),
                json!({"k": "1"}),
            )),
        )
        .await?;
    assert_eq!(first.annotations().len(), 2);

    // A field the manager no longer sends is removed.
    let second = api
        .patch(
            "doc",
            &force,
            &Patch::Apply(applied("doc", json!({"one": "1"}), json!({"k": "2"}))),
        )
        .await?;
    assert_eq!(
        second.annotations().keys().collect::<Vec<_>>(),
        vec!["one"],
        "the annotation no longer applied is gone"
    );

    // A resourceVersion in the applied object is a precondition.
    let observed = second.resource_version().unwrap_or_default();
    let mut body = applied("doc", json!({"one": "1"}), json!({"k": "3"}));
    body["metadata"]["resourceVersion"] = json!(observed);
    api.patch("doc", &force, &Patch::Apply(&body)).await?;
    body["data"]["k"] = json!("4");
    let error = api
        .patch("doc", &force, &Patch::Apply(&body))
        .await
        .expect_err("a stale resourceVersion");
    assert_eq!(code(&error), Some(409), "{error}");
    let now = api.get("doc").await?;
    assert_eq!(value_of(&now), Some("3"));
    Ok(())
}

async fn server_side_apply_tracks_managers_and_conflicts(
    client: Client,
    namespace: String,
) -> CheckResult {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let owner = PatchParams::apply("owner");
    let first = api
        .patch(
            "doc",
            &owner,
            &Patch::Apply(applied(
                "doc",
                json!({"one": "1", "two": "2"}),
                json!({"k": "1"}),
            )),
        )
        .await?;
    let managers: Vec<(String, String)> = first
        .managed_fields()
        .iter()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(managers, vec![("owner".to_owned(), "Apply".to_owned())]);

    // Another applier sharing a field keeps it when the owner stops sending
    // it; a field only the owner sent goes.
    api.patch(
        "doc",
        &PatchParams::apply("sharer"),
        &Patch::Apply(applied("doc", json!({"one": "1"}), json!({"k": "1"}))),
    )
    .await?;
    let after = api
        .patch(
            "doc",
            &owner,
            &Patch::Apply(applied("doc", json!({}), json!({"k": "1"}))),
        )
        .await?;
    assert_eq!(
        after.annotations().keys().collect::<Vec<_>>(),
        vec!["one"],
        "the shared annotation stays, the owner's own goes"
    );

    // Another manager conflicts on a field it does not own, unless it forces.
    let intruding = Patch::Apply(applied("doc", json!({}), json!({"k": "2"})));
    let error = api
        .patch("doc", &PatchParams::apply("intruder"), &intruding)
        .await
        .expect_err("a conflict with the owner");
    assert_eq!(code(&error), Some(409), "{error}");
    assert!(error.to_string().contains("conflict"), "{error}");
    let forced = api
        .patch("doc", &PatchParams::apply("intruder").force(), &intruding)
        .await?;
    assert_eq!(value_of(&forced), Some("2"));
    Ok(())
}

async fn updates_are_conditioned_on_the_resource_version(
    client: Client,
    namespace: String,
) -> CheckResult {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let created = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await?;
    // A write of the same content changes nothing, not even the version.
    let same = api.replace("a", &PostParams::default(), &created).await?;
    assert_eq!(same.resource_version(), created.resource_version());
    let mut changed = same.clone();
    changed
        .data
        .get_or_insert_default()
        .insert("k".into(), "changed".into());
    let replaced = api.replace("a", &PostParams::default(), &changed).await?;
    assert_ne!(replaced.resource_version(), created.resource_version());
    // The version read before the last write is stale.
    changed
        .data
        .get_or_insert_default()
        .insert("k".into(), "late".into());
    let error = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .expect_err("a stale resourceVersion");
    assert_eq!(code(&error), Some(409), "{error}");
    let now = api.get("a").await?;
    assert_eq!(value_of(&now), Some("changed"));
    Ok(())
}

async fn a_failed_json_patch_test_applies_nothing(
    client: Client,
    namespace: String,
) -> CheckResult {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let created = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await?;
    let uid = created.uid().unwrap_or_default();
    let patch = |uid: &str, value: &str| -> Result<json_patch::Patch, serde_json::Error> {
        serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "add", "path": "/metadata/annotations", "value": {"view": value}},
        ]))
    };
    let patched = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::<()>::Json(patch(&uid, "1")?),
        )
        .await?;
    assert_eq!(
        patched.annotations().get("view").map(String::as_str),
        Some("1")
    );
    let error = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::<()>::Json(patch("another-uid", "2")?),
        )
        .await
        .expect_err("a failed test op");
    assert_eq!(code(&error), Some(422), "{error}");
    let now = api.get("a").await?;
    assert_eq!(
        now.annotations().get("view").map(String::as_str),
        Some("1"),
        "nothing applied"
    );
    Ok(())
}

async fn deletes_are_conditioned_on_the_uid(client: Client, namespace: String) -> CheckResult {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let created = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await?;
    let precondition = |uid: &str| DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let error = api
        .delete("a", &precondition("another-uid"))
        .await
        .expect_err("another uid");
    assert_eq!(code(&error), Some(409), "{error}");
    assert!(api.get_opt("a").await?.is_some(), "still there");
    api.delete("a", &precondition(&created.uid().unwrap_or_default()))
        .await?;
    assert!(api.get_opt("a").await?.is_none(), "deleted");
    Ok(())
}

async fn paged_lists_return_every_item_once_at_one_version(
    client: Client,
    namespace: String,
) -> CheckResult {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let names: BTreeSet<String> = (0..25).map(|i| format!("cm-{i:02}")).collect();
    for name in &names {
        api.create(
            &PostParams::default(),
            &config_map(name, &[("paged", "yes")]),
        )
        .await?;
    }
    let mut seen = Vec::new();
    let mut versions = BTreeSet::new();
    let mut pages = 0;
    let mut params = ListParams::default().labels("paged=yes").limit(10);
    loop {
        let page = api.list(&params).await?;
        pages += 1;
        versions.insert(page.metadata.resource_version.clone().unwrap_or_default());
        seen.extend(page.items.iter().map(|cm| cm.name_any()));
        // Written between pages: not in this list (one snapshot).
        if pages == 1 {
            api.create(
                &PostParams::default(),
                &config_map("late", &[("paged", "yes")]),
            )
            .await?;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(pages, 3, "25 items in pages of 10");
    assert_eq!(seen.len(), names.len(), "every item once: {seen:?}");
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), names);
    assert_eq!(versions.len(), 1, "one snapshot: {versions:?}");
    Ok(())
}

async fn label_selected_watches_turn_leaving_into_deleted(
    client: Client,
    namespace: String,
) -> CheckResult {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let start = api
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut events = api
        .watch(&WatchParams::default().labels("selected=yes"), &start)
        .await?
        .boxed();
    let mut next =
        async || -> Result<(String, String), Box<dyn std::error::Error + Send + Sync>> {
            loop {
                let event = tokio::time::timeout(EVENT_TIMEOUT, events.next())
                    .await
                    .map_err(|_| "no watch event within the timeout")?
                    .ok_or("the watch ended")??;
                return Ok(match event {
                    WatchEvent::Added(cm) => ("ADDED".into(), cm.name_any()),
                    WatchEvent::Modified(cm) => ("MODIFIED".into(), cm.name_any()),
                    WatchEvent::Deleted(cm) => ("DELETED".into(), cm.name_any()),
                    WatchEvent::Bookmark(_) => continue,
                    WatchEvent::Error(error) => return Err(error.into()),
                });
            }
        };
    let relabel = |value: &str| json!({"metadata": {"labels": {"selected": value}}});
    api.create(
        &PostParams::default(),
        &config_map("out", &[("selected", "no")]),
    )
    .await?;
    api.create(
        &PostParams::default(),
        &config_map("in", &[("selected", "yes")]),
    )
    .await?;
    assert_eq!(
        next().await?,
        ("ADDED".into(), "in".into()),
        "the unselected one is not seen"
    );
    api.patch("in", &PatchParams::default(), &Patch::Merge(relabel("no")))
        .await?;
    assert_eq!(
        next().await?,
        ("DELETED".into(), "in".into()),
        "leaving the selector"
    );
    api.patch(
        "out",
        &PatchParams::default(),
        &Patch::Merge(relabel("yes")),
    )
    .await?;
    assert_eq!(
        next().await?,
        ("ADDED".into(), "out".into()),
        "joining the selector"
    );
    api.patch(
        "out",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await?;
    assert_eq!(next().await?, ("MODIFIED".into(), "out".into()));
    Ok(())
}

async fn set_based_and_field_selectors_filter_lists(
    client: Client,
    namespace: String,
) -> CheckResult {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    for (name, labels) in [
        ("a", vec![("app", "web"), ("tier", "front")]),
        ("b", vec![("app", "api")]),
        ("c", vec![("app", "db"), ("tier", "back")]),
        ("d", vec![]),
    ] {
        api.create(&PostParams::default(), &config_map(name, &labels))
            .await?;
    }
    let names = async |params: ListParams| -> Result<Vec<String>, kube::Error> {
        Ok(api
            .list(&params)
            .await?
            .items
            .iter()
            .map(|c| c.name_any())
            .collect())
    };
    let labels = |selector: &str| ListParams::default().labels(selector);
    assert_eq!(names(labels("app in (web,db)")).await?, vec!["a", "c"]);
    assert_eq!(names(labels("app notin (web),tier")).await?, vec!["c"]);
    assert_eq!(names(labels("app,!tier")).await?, vec!["b"]);
    let fields = ListParams::default().fields("metadata.name=b");
    assert_eq!(names(fields).await?, vec!["b"]);
    let error = api
        .list(&ListParams::default().fields("data.k=v"))
        .await
        .expect_err("an unsupported field");
    assert_eq!(code(&error), Some(400), "{error}");
    Ok(())
}
