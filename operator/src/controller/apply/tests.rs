//! The document write's bookkeeping: which stored ConfigMap is known to
//! hold exactly the document sent.

use super::*;
use k8s_openapi::ByteString;

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
