//! The published document in a ConfigMap: `data["assignment.json"]` as plain
//! JSON, or gzip-compressed JSON in `binaryData["assignment.json.gz"]` when the
//! plain form is above [`GZIP_THRESHOLD`], so a 20,000-shard group still fits
//! in the API server's 1 MiB object limit. Decoding accepts either key.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;

use crate::crds::AssignmentDocument;
use crate::crds::assignment::{CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY};

/// Plain documents above this many bytes are stored gzip-compressed.
pub const GZIP_THRESHOLD: usize = 256 * 1024;
/// Most bytes of document payload one ConfigMap may carry (the API server's
/// object limit is 1 MiB; the rest is left for metadata).
pub const MAX_PAYLOAD: usize = 1_000_000;

/// The ConfigMap payload of one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// `data` (the plain form), empty when compressed.
    pub data: BTreeMap<String, String>,
    /// `binaryData` (the gzip form), empty when plain.
    pub binary_data: BTreeMap<String, ByteString>,
    /// Bytes of payload (plain JSON or gzip), compared with [`MAX_PAYLOAD`].
    pub size: usize,
}

/// Why a document could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Even compressed, the document is above [`MAX_PAYLOAD`].
    #[error(
        "the assignment document is {size} bytes compressed, above the {MAX_PAYLOAD}-byte ConfigMap limit"
    )]
    TooLarge {
        /// Compressed size in bytes.
        size: usize,
    },
    /// The ConfigMap holds neither key.
    #[error("the ConfigMap has neither data[{CONFIGMAP_KEY}] nor binaryData[{CONFIGMAP_GZIP_KEY}]")]
    Missing,
    /// The payload is not a valid document.
    #[error("the assignment document is not valid JSON of the expected shape: {0}")]
    Json(#[from] serde_json::Error),
    /// The gzip payload could not be inflated.
    #[error("the compressed assignment document is not valid gzip: {0}")]
    Gzip(#[from] std::io::Error),
}

/// Encodes a document for the ConfigMap.
pub fn encode(doc: &AssignmentDocument) -> Result<Encoded, CodecError> {
    let json = serde_json::to_string(doc)?;
    if json.len() <= GZIP_THRESHOLD {
        let size = json.len();
        return Ok(Encoded {
            data: BTreeMap::from([(CONFIGMAP_KEY.to_owned(), json)]),
            binary_data: BTreeMap::new(),
            size,
        });
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(json.as_bytes())?;
    let bytes = gz.finish()?;
    if bytes.len() > MAX_PAYLOAD {
        return Err(CodecError::TooLarge { size: bytes.len() });
    }
    let size = bytes.len();
    Ok(Encoded {
        data: BTreeMap::new(),
        binary_data: BTreeMap::from([(CONFIGMAP_GZIP_KEY.to_owned(), ByteString(bytes))]),
        size,
    })
}

/// Decodes the document of a ConfigMap written by [`encode`].
pub fn decode(cm: &ConfigMap) -> Result<AssignmentDocument, CodecError> {
    if let Some(json) = cm.data.as_ref().and_then(|d| d.get(CONFIGMAP_KEY)) {
        return Ok(serde_json::from_str(json)?);
    }
    let bytes = cm
        .binary_data
        .as_ref()
        .and_then(|d| d.get(CONFIGMAP_GZIP_KEY))
        .ok_or(CodecError::Missing)?;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(bytes.0.as_slice()).read_to_end(&mut json)?;
    Ok(serde_json::from_slice(&json)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crds::{PodAssignment, ShardRecord};

    fn doc(shards: usize) -> AssignmentDocument {
        let mut d = AssignmentDocument {
            api_version: "shardring.io/v1alpha1".into(),
            kind: "Assignment".into(),
            shard_group: "ns/g".into(),
            epoch: 3,
            pods: BTreeMap::new(),
            shards: BTreeMap::new(),
        };
        for i in 0..shards {
            let pod = format!("consumer-{}", i % 5000);
            d.shards.insert(
                format!("shardId-{i:012}"),
                ShardRecord {
                    owner: Some(pod.clone()),
                    ..Default::default()
                },
            );
            d.pods
                .entry(pod)
                .or_insert_with(PodAssignment::default)
                .active
                .push(format!("shardId-{i:012}"));
        }
        d
    }

    fn config_map(e: Encoded) -> ConfigMap {
        ConfigMap {
            data: (!e.data.is_empty()).then_some(e.data),
            binary_data: (!e.binary_data.is_empty()).then_some(e.binary_data),
            ..Default::default()
        }
    }

    #[test]
    fn small_documents_stay_plain_and_round_trip() {
        let d = doc(10);
        let e = encode(&d).unwrap();
        assert!(e.binary_data.is_empty() && e.data.contains_key(CONFIGMAP_KEY));
        assert_eq!(decode(&config_map(e)).unwrap(), d);
    }

    #[test]
    fn twenty_thousand_shards_compress_under_the_limit() {
        let d = doc(20_000);
        let e = encode(&d).unwrap();
        assert!(e.data.is_empty() && e.size < MAX_PAYLOAD, "size {}", e.size);
        assert_eq!(decode(&config_map(e)).unwrap(), d);
    }

    #[test]
    fn missing_payload_is_an_error() {
        assert!(matches!(
            decode(&ConfigMap::default()),
            Err(CodecError::Missing)
        ));
    }
}
