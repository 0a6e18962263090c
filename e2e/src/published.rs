//! Reading what the operator published, the way a consumer would: the
//! assignment document from ConfigMap `<shardgroup>-assignment` (plain
//! `assignment.json`, or gzipped `assignment.json.gz` in `binaryData` for very
//! large groups) and a pod's view from its annotation.

use std::io::Read;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use shardring_crds::assignment::{ANNOTATION_PREFIX, CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY};
use shardring_crds::{AssignmentDocument, PodView};

/// Why a published document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PublishedError {
    /// The ConfigMap has neither key.
    #[error("ConfigMap has neither data.{CONFIGMAP_KEY} nor binaryData.{CONFIGMAP_GZIP_KEY}")]
    Missing,
    /// The gzip stream is corrupt.
    #[error("binaryData.{CONFIGMAP_GZIP_KEY} is not valid gzip: {0}")]
    Gzip(#[source] std::io::Error),
    /// The JSON does not match the published types.
    #[error("the published JSON does not parse: {0}")]
    Json(#[source] serde_json::Error),
}

/// The assignment document in an assignment ConfigMap.
pub fn assignment_document(config_map: &ConfigMap) -> Result<AssignmentDocument, PublishedError> {
    if let Some(json) = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(CONFIGMAP_KEY))
    {
        return serde_json::from_str(json).map_err(PublishedError::Json);
    }
    let gzipped = config_map
        .binary_data
        .as_ref()
        .and_then(|data| data.get(CONFIGMAP_GZIP_KEY))
        .ok_or(PublishedError::Missing)?;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(gzipped.0.as_slice())
        .read_to_end(&mut json)
        .map_err(PublishedError::Gzip)?;
    serde_json::from_slice(&json).map_err(PublishedError::Json)
}

/// The default annotation key of a ShardGroup: `assignment.shardring.io/<name>`.
pub fn default_annotation_key(shard_group: &str) -> String {
    format!("{ANNOTATION_PREFIX}{shard_group}")
}

/// The pod's view in annotation `key`, `None` when the pod has no such
/// annotation.
pub fn pod_view(pod: &Pod, key: &str) -> Result<Option<PodView>, PublishedError> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .map(|json| serde_json::from_str(json).map_err(PublishedError::Json))
        .transpose()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Write;

    use k8s_openapi::ByteString;

    use super::*;

    const DOC: &str = r#"{"apiVersion":"shardring.io/v1alpha1","kind":"Assignment","shardGroup":"ns/orders","epoch":3,
        "pods":{"p-0":{"active":["orders-0"]}},"shards":{"orders-0":{"owner":"p-0","state":"Active"}}}"#;

    #[test]
    fn reads_plain_json() {
        let cm = ConfigMap {
            data: Some(BTreeMap::from([(CONFIGMAP_KEY.to_owned(), DOC.to_owned())])),
            ..Default::default()
        };
        let doc = assignment_document(&cm).unwrap();
        assert_eq!(doc.epoch, 3);
        assert_eq!(doc.pods["p-0"].active, vec!["orders-0".to_owned()]);
    }

    #[test]
    fn reads_gzipped_json() {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(DOC.as_bytes()).unwrap();
        let gz = encoder.finish().unwrap();
        let cm = ConfigMap {
            binary_data: Some(BTreeMap::from([(
                CONFIGMAP_GZIP_KEY.to_owned(),
                ByteString(gz),
            )])),
            ..Default::default()
        };
        assert_eq!(assignment_document(&cm).unwrap().shard_group, "ns/orders");
    }

    #[test]
    fn an_empty_config_map_is_an_error() {
        assert!(matches!(
            assignment_document(&ConfigMap::default()),
            Err(PublishedError::Missing)
        ));
    }

    #[test]
    fn reads_the_pod_view_from_the_default_annotation() {
        let mut pod = Pod::default();
        let key = default_annotation_key("orders");
        assert_eq!(key, "assignment.shardring.io/orders");
        assert!(pod_view(&pod, &key).unwrap().is_none());
        pod.metadata.annotations = Some(BTreeMap::from([(
            format!("{ANNOTATION_PREFIX}orders"),
            r#"{"epoch":7,"active":["orders-1"]}"#.to_owned(),
        )]));
        let view = pod_view(&pod, &key).unwrap().unwrap();
        assert_eq!((view.epoch, view.active), (7, vec!["orders-1".to_owned()]));
    }
}
