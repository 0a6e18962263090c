//! The document write's body (what an update carries over from the
//! observed ConfigMap) and its bookkeeping (which stored ConfigMap is known
//! to hold exactly the document sent).

use super::*;
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

fn config_map(data: &[(&str, &str)], binary: &[(&str, &[u8])], version: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            resource_version: Some(version.into()),
            ..Default::default()
        },
        data: (!data.is_empty()).then(|| {
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        }),
        binary_data: (!binary.is_empty()).then(|| {
            binary
                .iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                .collect()
        }),
        ..Default::default()
    }
}

#[test]
fn a_document_stored_as_sent_is_known_at_its_version() {
    let sent = config_map(&[], &[(CONFIGMAP_GZIP_KEY, b"gz")], "");
    let written = config_map(&[], &[(CONFIGMAP_GZIP_KEY, b"gz")], "17");
    assert_eq!(stored_as_sent(&sent, &written), Some("17".into()));
    let plain = config_map(&[(CONFIGMAP_KEY, "{}")], &[], "");
    let stored = config_map(&[(CONFIGMAP_KEY, "{}")], &[], "18");
    assert_eq!(stored_as_sent(&plain, &stored), Some("18".into()));
}

#[test]
fn a_document_stored_otherwise_is_not_known() {
    let sent = config_map(&[], &[(CONFIGMAP_GZIP_KEY, b"gz")], "");
    // Another writer's key beside ours, other bytes, or no version.
    let extra = config_map(
        &[(CONFIGMAP_KEY, "{}")],
        &[(CONFIGMAP_GZIP_KEY, b"gz")],
        "5",
    );
    let other = config_map(&[], &[(CONFIGMAP_GZIP_KEY, b"zz")], "6");
    let unversioned = config_map(&[], &[(CONFIGMAP_GZIP_KEY, b"gz")], "");
    for written in [extra, other, unversioned] {
        assert_eq!(stored_as_sent(&sent, &written), None, "{written:?}");
    }
}

fn owner(uid: &str, kind: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: kind.into(),
        name: "x".into(),
        uid: uid.into(),
        ..Default::default()
    }
}

/// The document's ConfigMap as the update writes it: gzip, our labels and
/// owner reference.
fn ours() -> ConfigMap {
    let mut cm = config_map(&[], &[(CONFIGMAP_GZIP_KEY, b"new")], "");
    cm.metadata.labels = Some(BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (GROUP_LABEL.to_owned(), "orders".to_owned()),
    ]));
    cm.metadata.owner_references = Some(vec![owner("group-uid", "ShardGroup")]);
    cm
}

#[test]
fn an_update_carries_the_observed_version_and_what_others_set() {
    let mut observed = config_map(
        &[(CONFIGMAP_KEY, "{\"epoch\":3}"), ("notes", "kept")],
        &[("extra.bin", b"kept")],
        "41",
    );
    observed.metadata.labels = Some(BTreeMap::from([
        ("team".to_owned(), "orders".to_owned()),
        (GROUP_LABEL.to_owned(), "edited".to_owned()),
    ]));
    observed.metadata.annotations = Some(BTreeMap::from([("note".into(), "kept".into())]));
    observed.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let mut stale_ref = owner("group-uid", "ShardGroup");
    stale_ref.controller = Some(false);
    observed.metadata.owner_references = Some(vec![owner("other-uid", "Widget"), stale_ref]);
    observed.metadata.managed_fields = Some(vec![Default::default()]);

    let body = update_body(ours(), Some(&observed), "41");
    assert_eq!(body.metadata.resource_version.as_deref(), Some("41"));
    let labels = body.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["team"], "orders", "another writer's label stays");
    assert_eq!(labels[GROUP_LABEL], "orders", "ours is put back");
    assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
    assert_eq!(body.metadata.annotations, observed.metadata.annotations);
    assert_eq!(body.metadata.finalizers, observed.metadata.finalizers);
    assert_eq!(
        body.metadata.owner_references,
        Some(vec![
            owner("other-uid", "Widget"),
            owner("group-uid", "ShardGroup")
        ]),
        "another owner stays; ours replaces its own uid's entry"
    );
    assert!(
        body.metadata.managed_fields.is_none(),
        "managed fields are the server's to keep"
    );
    // The plain key of the previous encoding goes; others' keys stay.
    assert_eq!(
        body.data,
        Some(BTreeMap::from([("notes".to_owned(), "kept".to_owned())]))
    );
    assert_eq!(
        body.binary_data,
        Some(BTreeMap::from([
            ("extra.bin".to_owned(), ByteString(b"kept".to_vec())),
            (CONFIGMAP_GZIP_KEY.to_owned(), ByteString(b"new".to_vec())),
        ]))
    );
    // What comes back as written is known as the document sent.
    let mut written = body.clone();
    written.metadata.resource_version = Some("42".into());
    assert_eq!(stored_as_sent(&body, &written), Some("42".into()));
}

#[test]
fn an_update_without_the_observed_object_is_the_document_at_the_version() {
    let body = update_body(ours(), None, "7");
    let mut expected = ours();
    expected.metadata.resource_version = Some("7".into());
    assert_eq!(body, expected);
}
