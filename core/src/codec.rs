//! The published document in its ConfigMap: a thin adapter from the API
//! crate's encoding (plain JSON in `data["assignment.json"]`, gzip in
//! `binaryData["assignment.json.gz"]` when large, refusing what cannot fit)
//! to the ConfigMap object the controller caches and writes.

use k8s_openapi::api::core::v1::ConfigMap;

use crate::crds::AssignmentDocument;
use crate::crds::assignment::encoding;
pub use crate::crds::assignment::encoding::{
    Changes, DecodeError, EncodeCache, EncodeError, EncodedDocument,
};

/// Encodes a document for the ConfigMap's `data` / `binaryData`.
pub fn encode(doc: &AssignmentDocument) -> Result<EncodedDocument, EncodeError> {
    encoding::encode(doc)
}

/// [`encode`], recompressing only what changed since `cache`'s last
/// encode: the same bytes, whatever `cache` holds.
pub fn encode_with(
    doc: &AssignmentDocument,
    cache: &mut EncodeCache,
) -> Result<EncodedDocument, EncodeError> {
    encoding::encode_with(doc, cache)
}

/// [`encode_with`], for a document that differs from the one `cache`
/// encoded last only in what `changes` names: the chunks of JSON holding
/// none of it are taken as they were, unwritten. The same bytes, given
/// changes that name every record that differs.
pub fn encode_changed(
    doc: &AssignmentDocument,
    cache: &mut EncodeCache,
    changes: &Changes,
) -> Result<EncodedDocument, EncodeError> {
    encoding::encode_changed(doc, cache, changes)
}

/// Decodes the document of a ConfigMap written by [`encode`].
pub fn decode(cm: &ConfigMap) -> Result<AssignmentDocument, DecodeError> {
    encoding::decode(cm.data.as_ref(), cm.binary_data.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_map_round_trips() {
        let mut doc = AssignmentDocument::new("ns/g", 4);
        doc.shards.insert(
            "s-0".into(),
            crate::crds::ShardRecord {
                owner: Some("p".into()),
                ..Default::default()
            },
        );
        doc.reindex_pods();
        let encoded = encode(&doc).unwrap();
        let cm = ConfigMap {
            data: Some(encoded.data),
            binary_data: Some(encoded.binary_data),
            ..Default::default()
        };
        assert_eq!(decode(&cm).unwrap(), doc);
        assert!(matches!(
            decode(&ConfigMap::default()),
            Err(DecodeError::Missing)
        ));
    }
}
