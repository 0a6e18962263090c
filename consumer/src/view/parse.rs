//! Parsing the three shapes a pod's view arrives in: the whole assignment
//! document (plain `assignment.json` or gzip `assignment.json.gz`, as a
//! mounted ConfigMap file or ConfigMap data), the compact per-pod annotation
//! value, and the downward-API annotations file kubelet writes
//! (`key="value"` lines, values quoted the way Go's `%q` quotes them).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use shardring_crds::assignment::encoding::{self, DecodeError};
use shardring_crds::assignment::{
    ANNOTATION_PREFIX, AssignmentDocument, CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY, PodView,
};

/// Why a view could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The document is not a valid assignment document.
    #[error("invalid assignment document: {0}")]
    Document(#[from] DecodeError),
    /// The annotation value is not a per-pod view.
    #[error("invalid per-pod view in annotation {key}: {source}")]
    Annotation {
        /// The annotation key.
        key: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A line of the downward-API file is not `key="quoted value"`.
    #[error("line {line} of the annotations file is not key=\"value\": {detail}")]
    AnnotationsFile {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
}

/// gzip's two magic bytes.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Reads an assignment document from the bytes of a mounted ConfigMap file:
/// gzip (`assignment.json.gz`, recognised by its magic bytes) or plain JSON.
/// Goes through the API crate's decoder, so the apiVersion check and the
/// inflated-size limit are the same as for the ConfigMap itself.
pub fn document_from_bytes(bytes: &[u8]) -> Result<AssignmentDocument, ParseError> {
    if bytes.starts_with(&GZIP_MAGIC) {
        let binary = BTreeMap::from([(CONFIGMAP_GZIP_KEY.to_owned(), ByteString(bytes.to_vec()))]);
        Ok(encoding::decode(None, Some(&binary))?)
    } else {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let data = BTreeMap::from([(CONFIGMAP_KEY.to_owned(), text)]);
        Ok(encoding::decode(Some(&data), None)?)
    }
}

/// The view of `pod` in `document` (empty lists when the pod is not in it).
pub fn view_from_document(document: &AssignmentDocument, pod: &str) -> PodView {
    document.pod_view(pod)
}

/// The annotation key of `shard_group`'s view: `assignment.shardring.io/<name>`.
/// `shard_group` may be `<namespace>/<name>` or just the name.
pub fn annotation_key(shard_group: &str) -> String {
    let name = shard_group.rsplit('/').next().unwrap_or(shard_group);
    format!("{ANNOTATION_PREFIX}{name}")
}

/// Parses the downward-API annotations file (`metadata.annotations` projected
/// into a volume): one `key="value"` line per annotation, the value quoted as
/// Go's `strconv.Quote` does.
pub fn parse_annotations_file(text: &str) -> Result<BTreeMap<String, String>, ParseError> {
    let mut out = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let fail = |detail: &str| ParseError::AnnotationsFile {
            line: index + 1,
            detail: detail.to_owned(),
        };
        let (key, quoted) = line.split_once('=').ok_or_else(|| fail("no '='"))?;
        let value = unquote_go(quoted).map_err(|detail| fail(&detail))?;
        out.insert(key.to_owned(), value);
    }
    Ok(out)
}

/// The view of `shard_group` from a downward-API file; `Ok(None)` when the
/// pod has no such annotation yet (not assigned anything so far). Two
/// shapes are read: `fieldPath: metadata.annotations` (all annotations as
/// `key="value"` lines) and `fieldPath:
/// metadata.annotations['assignment.shardring.io/<name>']` (the bare JSON
/// value; an empty file while the annotation is absent).
pub fn view_from_annotations_file(
    text: &str,
    shard_group: &str,
) -> Result<Option<PodView>, ParseError> {
    let key = annotation_key(shard_group);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    if trimmed.starts_with('{') {
        return PodView::from_annotation(trimmed)
            .map(Some)
            .map_err(|source| ParseError::Annotation { key, source });
    }
    let annotations = parse_annotations_file(text)?;
    annotations
        .get(&key)
        .map(|value| {
            PodView::from_annotation(value).map_err(|source| ParseError::Annotation {
                key: key.clone(),
                source,
            })
        })
        .transpose()
}

/// Undoes Go's `strconv.Quote`: a double-quoted string with `\"`, `\\`,
/// `\n`, `\t`, `\r`, `\a`, `\b`, `\f`, `\v`, `\xNN` (a byte), `\NNN` (octal
/// byte), `\uNNNN` and `\UNNNNNNNN` escapes.
pub fn unquote_go(quoted: &str) -> Result<String, String> {
    let inner = quoted
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .ok_or_else(|| "value is not double-quoted".to_owned())?;
    // Work in bytes: `\xNN` escapes produce raw bytes of UTF-8 sequences.
    let mut bytes = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let escape = chars.next().ok_or("dangling backslash")?;
        let mut hex = |digits: usize| -> Result<u32, String> {
            let text: String = chars.by_ref().take(digits).collect();
            if text.len() != digits {
                return Err(format!("short \\{escape} escape"));
            }
            u32::from_str_radix(&text, 16).map_err(|e| format!("bad \\{escape} escape: {e}"))
        };
        match escape {
            '"' => bytes.push(b'"'),
            '\\' => bytes.push(b'\\'),
            '\'' => bytes.push(b'\''),
            'n' => bytes.push(b'\n'),
            't' => bytes.push(b'\t'),
            'r' => bytes.push(b'\r'),
            'a' => bytes.push(0x07),
            'b' => bytes.push(0x08),
            'f' => bytes.push(0x0c),
            'v' => bytes.push(0x0b),
            'x' => bytes.push(u8::try_from(hex(2)?).map_err(|_| "bad \\x escape".to_owned())?),
            'u' | 'U' => {
                let code = hex(if escape == 'u' { 4 } else { 8 })?;
                let c = char::from_u32(code).ok_or_else(|| format!("bad code point {code:#x}"))?;
                let mut buf = [0u8; 4];
                bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            '0'..='7' => {
                let rest: String = chars.by_ref().take(2).collect();
                let text = format!("{escape}{rest}");
                let value =
                    u8::from_str_radix(&text, 8).map_err(|e| format!("bad octal escape: {e}"))?;
                bytes.push(value);
            }
            other => return Err(format!("unknown escape \\{other}")),
        }
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8 after unquoting: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardring_crds::assignment::{PodAssignment, ShardRecord};
    use std::io::Write;

    fn document(epoch: u64) -> AssignmentDocument {
        let mut doc = AssignmentDocument::new("prod/orders", epoch);
        doc.pods.insert(
            "pod-a".into(),
            PodAssignment {
                active: vec!["shardId-000000000001".into()],
                standby: vec![],
                revoking: vec!["shardId-000000000002".into()],
                held: Vec::new(),
            },
        );
        doc.shards
            .insert("shardId-000000000001".into(), ShardRecord::default());
        doc
    }

    #[test]
    fn reads_plain_and_gzip_documents() {
        let doc = document(7);
        let json = serde_json::to_vec(&doc).unwrap();
        assert_eq!(document_from_bytes(&json).unwrap(), doc);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&json).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(document_from_bytes(&gz).unwrap(), doc);
        let view = view_from_document(&doc, "pod-a");
        assert_eq!(view.epoch, 7);
        assert_eq!(view.active, vec!["shardId-000000000001"]);
        assert_eq!(view.revoking, vec!["shardId-000000000002"]);
        assert_eq!(view_from_document(&doc, "pod-z").active.len(), 0);
    }

    #[test]
    fn rejects_garbage_and_foreign_versions() {
        assert!(document_from_bytes(b"{not json").is_err());
        let mut doc = document(1);
        doc.api_version = "shardring.io/v9".into();
        let json = serde_json::to_vec(&doc).unwrap();
        assert!(matches!(
            document_from_bytes(&json),
            Err(ParseError::Document(DecodeError::UnsupportedVersion { .. }))
        ));
    }

    #[test]
    fn reads_the_downward_api_file_format() {
        // Exactly what kubelet writes: sorted `key="value"` lines, Go quoting.
        let view = PodView {
            epoch: 42,
            active: vec!["shardId-000000000001".into()],
            standby: vec![],
            revoking: vec!["shardId-000000000003".into()],
            held: Vec::new(),
        };
        let value = view.to_annotation().replace('"', "\\\"");
        let text = format!(
            "assignment.shardring.io/orders=\"{value}\"\n\
             kubernetes.io/config.seen=\"2026-11-21T19:00:00.000Z\"\n\
             note=\"tab\\there \\u00e9 \\x41 \\101\\\\\"\n"
        );
        let parsed = view_from_annotations_file(&text, "prod/orders")
            .unwrap()
            .unwrap();
        assert_eq!(parsed, view);
        let all = parse_annotations_file(&text).unwrap();
        assert_eq!(all["note"], "tab\there é A A\\");
        assert_eq!(view_from_annotations_file(&text, "other").unwrap(), None);
    }

    #[test]
    fn reads_a_single_annotation_projection() {
        let view = PodView {
            epoch: 3,
            active: vec!["orders-1".into()],
            ..PodView::default()
        };
        let text = view.to_annotation();
        assert_eq!(
            view_from_annotations_file(&text, "orders").unwrap(),
            Some(view)
        );
        assert_eq!(view_from_annotations_file("", "orders").unwrap(), None);
        assert!(view_from_annotations_file("{\"active\": []}", "orders").is_err());
    }

    #[test]
    fn rejects_malformed_annotation_lines() {
        assert!(parse_annotations_file("novalue\n").is_err());
        assert!(parse_annotations_file("k=unquoted\n").is_err());
        assert!(parse_annotations_file("k=\"bad \\q escape\"\n").is_err());
        assert!(view_from_annotations_file("assignment.shardring.io/g=\"{}\"", "g").is_err());
    }
}
