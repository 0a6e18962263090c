//! Create, get, replace: resourceVersions, uids, 409s and 404s.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::{code, config_map, reason, rv_of, server};

#[tokio::test]
async fn create_get_replace_with_resource_versions_and_conflicts() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let created = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    let rv1 = rv_of(&created.metadata);
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());

    let err = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap_err();
    assert_eq!((code(&err), reason(&err).as_str()), (409, "AlreadyExists"));

    let mut fetched = api.get("a").await.unwrap();
    assert_eq!(fetched.metadata.uid, created.metadata.uid);
    fetched
        .data
        .as_mut()
        .unwrap()
        .insert("k".into(), "changed".into());
    let replaced = api
        .replace("a", &PostParams::default(), &fetched)
        .await
        .unwrap();
    assert!(rv_of(&replaced.metadata) > rv1);
    assert_eq!(replaced.data.unwrap()["k"], "changed");

    // A stale resourceVersion: the write the client read before is gone.
    let err = api
        .replace("a", &PostParams::default(), &fetched)
        .await
        .unwrap_err();
    assert_eq!((code(&err), reason(&err).as_str()), (409, "Conflict"));

    let err = api.get("missing").await.unwrap_err();
    assert_eq!((code(&err), reason(&err).as_str()), (404, "NotFound"));
    let err = api
        .replace(
            "missing",
            &PostParams::default(),
            &config_map("missing", &[]),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), 404);
    assert!(api.get_opt("missing").await.unwrap().is_none());
}

#[tokio::test]
async fn a_no_op_write_keeps_the_resource_version() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let created = api
        .create(&PostParams::default(), &config_map("a", &[]))
        .await
        .unwrap();
    let same = api
        .replace("a", &PostParams::default(), &created)
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        created.metadata.resource_version
    );
    let fetched = api.get("a").await.unwrap();
    assert_eq!(rv_of(&fetched.metadata), rv_of(&created.metadata));
}

#[tokio::test]
async fn two_lease_writers_from_the_same_read_one_wins() {
    let server = server().await;
    let api: Api<Lease> = Api::default_namespaced(server.client().await);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": { "name": "leader" },
        "spec": { "holderIdentity": "a", "leaseDurationSeconds": 15 },
    }))
    .unwrap();
    api.create(&PostParams::default(), &lease).await.unwrap();
    let read = api.get("leader").await.unwrap();
    let (mut first, mut second) = (read.clone(), read);
    first.spec.as_mut().unwrap().holder_identity = Some("b".into());
    second.spec.as_mut().unwrap().holder_identity = Some("c".into());
    api.replace("leader", &PostParams::default(), &first)
        .await
        .unwrap();
    let err = api
        .replace("leader", &PostParams::default(), &second)
        .await
        .unwrap_err();
    assert_eq!(code(&err), 409);
    let now = api.get("leader").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

#[tokio::test]
async fn direct_writes_share_the_counter_and_generate_name_is_refused() {
    let server = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client().await);
    let mut cm = config_map("", &[]);
    cm.metadata.name = None;
    cm.metadata.generate_name = Some("doc-".into());
    let err = api.create(&PostParams::default(), &cm).await.unwrap_err();
    assert_eq!(code(&err), 422);
    assert!(
        err.to_string().contains("generateName is not served"),
        "{err}"
    );
    let created = api
        .create(&PostParams::default(), &config_map("doc", &[]))
        .await
        .unwrap();

    let before = rv_of(&created.metadata);
    let direct = server.create(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "direct" }, "data": { "a": "1" },
    }));
    assert_eq!(
        direct["metadata"]["resourceVersion"],
        (before + 1).to_string()
    );
    let via_http = api.get("direct").await.unwrap();
    assert_eq!(via_http.data.unwrap()["a"], "1");
    assert_eq!(server.list("v1", "ConfigMap", Some("default")).len(), 2);
    assert!(
        server
            .get("v1", "ConfigMap", Some("default"), "direct")
            .is_some()
    );
}
