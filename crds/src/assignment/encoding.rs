//! How an [`AssignmentDocument`] is stored in its ConfigMap, within the API
//! server's 1 MiB object limit.
//!
//! - While the compact JSON is at most [`PLAIN_LIMIT_BYTES`] (768 KiB) it goes
//!   to `data["assignment.json"]`, readable with `kubectl get cm -o yaml`.
//! - Above that it is gzip-compressed into `binaryData["assignment.json.gz"]`.
//! - If that exceeds [`MAX_ENCODED_BYTES`] and shards carry `hashKeyRange`,
//!   the ranges are left out and the rest is compressed again
//!   ([`EncodedDocument::hash_key_ranges_omitted`]). Ranges are informational
//!   for consumers (the Kinesis API has them too) and are ~70% of the
//!   compressed size, since the 39-digit numbers of an even split barely
//!   compress; ownership, states, standbys, parents and handoffs are always
//!   complete.
//! - If even that exceeds [`MAX_ENCODED_BYTES`], [`encode`] refuses with
//!   [`EncodeError::TooLarge`]: the controller reports it as the status reason
//!   `AssignmentTooLarge` and keeps the last published document. A truncated
//!   assignment is never produced.
//!
//! How large documents get, and what fits, is measured by `cargo run
//! --release -p shardring-crds --example document_size` (the table is in
//! docs/api.md): 20,000 shards on 5,000 pods fit with their ranges as gzip
//! ([`LEVELS`]), with one standby per shard only without the ranges, and
//! 100,000 shards are refused.
//!
//! Exactly one of the two keys is written; the operator's update replaces
//! both, so the other one is removed with it. Consumers read whichever is present
//! ([`decode`]); should both be present (a reader racing a hand edit), the one
//! with the higher epoch wins. Sizes are counted the way the API server's
//! ConfigMap validation counts them (raw bytes of every `data` and
//! `binaryData` value; etcd stores `binaryData` as raw bytes too), plus key
//! lengths, against 1 MiB minus 64 KiB of headroom for metadata and managed
//! fields. The base64 form only exists on the wire, whose limit is 3 MiB.
//!
//! The encoding is deterministic (fixed gzip header, no timestamp), so an
//! unchanged document yields identical bytes and a no-op apply.
//!
//! # Compressed in chunks
//!
//! The gzip value is one gzip member (one deflate stream, one trailer) of
//! exactly the compact JSON `serde_json` writes, as any gzip reader
//! expects. Inside, the JSON is deflated in chunks, each ended by a full
//! flush, so that [`encode_with`] and the [`EncodeCache`] of the last
//! encode recompress only the chunks whose JSON changed: at 20,000 shards
//! a pod event re-gzipped several megabytes of JSON, now the few chunks
//! it touched. The bytes do not depend on the cache (`encoding/chunks.rs`
//! says how). Told which records changed since the cache's last document
//! ([`encode_changed`], [`Changes`]), an encode does not even write the
//! JSON of the chunks that hold none of them.

mod chunks;

use std::collections::BTreeMap;
use std::io::Read as _;

use flate2::read::GzDecoder;
use k8s_openapi::ByteString;

pub use self::chunks::{Changes, EncodeCache, RECORDS_PER_CHUNK};
use self::chunks::{GzipChunks, Span, write_chunks, write_laid_out};

use super::{
    ASSIGNMENT_API_VERSION, ASSIGNMENT_KIND, AssignmentDocument, CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY,
};

/// The API server's limit on a ConfigMap's data (and etcd's practical object limit).
pub const CONFIGMAP_LIMIT_BYTES: usize = 1_048_576;
/// Room left for metadata, labels, owner references and managed fields.
pub const HEADROOM_BYTES: usize = 64 * 1024;
/// Largest encoded payload [`encode`] produces (keys plus raw value bytes, as
/// the API server's ConfigMap validation counts them).
pub const MAX_ENCODED_BYTES: usize = CONFIGMAP_LIMIT_BYTES - HEADROOM_BYTES;
/// Largest plain JSON document stored uncompressed in `data`.
pub const PLAIN_LIMIT_BYTES: usize = 768 * 1024;
/// Largest document [`decode`] inflates, a guard against a corrupt or hostile
/// ConfigMap (a 1 MiB gzip bomb can inflate to a gigabyte).
pub const MAX_DECODED_BYTES: usize = 64 * 1024 * 1024;

/// Which representation [`encode`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Compact JSON in `data["assignment.json"]`.
    Plain,
    /// Gzip-compressed JSON in `binaryData["assignment.json.gz"]`.
    Gzip,
}

/// The ConfigMap payload of a document: set the ConfigMap's `data` and
/// `binaryData` to exactly these maps (one of them holds the document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedDocument {
    /// Goes to `ConfigMap.data`.
    pub data: BTreeMap<String, String>,
    /// Goes to `ConfigMap.binaryData`.
    pub binary_data: BTreeMap<String, ByteString>,
    /// Which of the two holds the document.
    pub encoding: Encoding,
    /// Size of the compact JSON before any compression.
    pub json_bytes: usize,
    /// Whether shards' `hashKeyRange` had to be left out to fit.
    pub hash_key_ranges_omitted: bool,
}

impl EncodedDocument {
    /// Payload size as counted against [`MAX_ENCODED_BYTES`]: key lengths plus
    /// raw value lengths (the API server's ConfigMap size rule).
    pub fn encoded_bytes(&self) -> usize {
        payload_bytes(Some(&self.data), Some(&self.binary_data))
    }
}

/// The size of a ConfigMap's `data` and `binaryData` as the API server
/// counts it against its limit: key lengths plus raw value lengths.
pub fn payload_bytes(
    data: Option<&BTreeMap<String, String>>,
    binary_data: Option<&BTreeMap<String, ByteString>>,
) -> usize {
    let data: usize = data
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let binary: usize = binary_data
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.0.len())
        .sum();
    data + binary
}

/// Why a document could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// Even compressed, the document does not fit in one ConfigMap.
    #[error(
        "assignment of {shards} shards and {pods} pods is too large for a ConfigMap: {json_bytes} bytes of JSON, \
         {encoded_bytes} bytes of gzip even without hash key ranges, limit {limit}; \
         split the shards over several ShardGroups"
    )]
    TooLarge {
        /// Shards in the document.
        shards: usize,
        /// Pods in the document.
        pods: usize,
        /// Compact JSON size.
        json_bytes: usize,
        /// Compressed size as counted (raw bytes plus key).
        encoded_bytes: usize,
        /// The limit it exceeded ([`MAX_ENCODED_BYTES`]).
        limit: usize,
    },
    /// Serialization or compression failed (not expected for valid documents).
    #[error("encoding the assignment: {0}")]
    Io(#[from] std::io::Error),
}

impl EncodeError {
    /// Constant reason for status conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "AssignmentTooLarge",
            Self::Io(_) => "AssignmentEncodingFailed",
        }
    }

    /// Label for the errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "assignment_too_large",
            Self::Io(_) => "assignment_encoding",
        }
    }
}

/// Why a ConfigMap's payload could not be read as an assignment document.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Neither `assignment.json` nor `assignment.json.gz` is present.
    #[error("the ConfigMap has neither data[{CONFIGMAP_KEY}] nor binaryData[{CONFIGMAP_GZIP_KEY}]")]
    Missing,
    /// The gzip stream is corrupt or inflates beyond [`MAX_DECODED_BYTES`].
    #[error(
        "binaryData[{CONFIGMAP_GZIP_KEY}] is not a valid gzip stream of at most {MAX_DECODED_BYTES} bytes: {0}"
    )]
    Gzip(std::io::Error),
    /// The JSON does not match the document shape.
    #[error("the assignment document is not valid JSON of the expected shape: {0}")]
    Json(#[from] serde_json::Error),
    /// The document is of another apiVersion or kind than this library reads.
    #[error(
        "unsupported assignment document {api_version}/{kind}: expected {ASSIGNMENT_API_VERSION}/{ASSIGNMENT_KIND}"
    )]
    UnsupportedVersion {
        /// The document's `apiVersion`.
        api_version: String,
        /// The document's `kind`.
        kind: String,
    },
}

/// Encodes `document` for its ConfigMap: plain JSON while it is at most
/// [`PLAIN_LIMIT_BYTES`], gzip in `binaryData` above that (without hash key
/// ranges if needed), or [`EncodeError::TooLarge`] when even that exceeds
/// [`MAX_ENCODED_BYTES`]. The same bytes as [`encode_with`], without a cache.
pub fn encode(document: &AssignmentDocument) -> Result<EncodedDocument, EncodeError> {
    encode_chunked(document, None, None)
}

/// [`encode`], recompressing only the chunks of JSON that are not in
/// `cache`, which then holds the chunks of this encode (and no others).
/// The result is exactly [`encode`]'s, whatever the cache held.
pub fn encode_with(
    document: &AssignmentDocument,
    cache: &mut EncodeCache,
) -> Result<EncodedDocument, EncodeError> {
    cache.begin_encode();
    let encoded = encode_chunked(document, Some(cache), None);
    cache.end_encode();
    encoded
}

/// [`encode_with`], for a document that differs from the one `cache`
/// encoded last only in the epoch and the records `changes` names: the
/// chunks of JSON that hold none of them are taken as they were, without
/// writing their JSON. The result is exactly [`encode`]'s when `changes`
/// is complete; when the cache's last encode is not of the document at
/// `changes`' base epoch (of this group), or did not store it as gzip, it
/// is [`encode_with`]'s.
pub fn encode_changed(
    document: &AssignmentDocument,
    cache: &mut EncodeCache,
    changes: &Changes,
) -> Result<EncodedDocument, EncodeError> {
    cache.begin_encode();
    let encoded = encode_chunked(document, Some(cache), Some(changes));
    cache.end_encode();
    encoded
}

fn encode_chunked(
    document: &AssignmentDocument,
    mut cache: Option<&mut EncodeCache>,
    changes: Option<&Changes>,
) -> Result<EncodedDocument, EncodeError> {
    let (first, json_bytes, layout) = first_pass(document, cache.as_deref_mut(), changes)?;
    let gzip = match first {
        First::Plain { json, .. } => {
            if let Some(cache) = cache {
                cache.forget_spans();
            }
            let json = String::from_utf8(json).expect("serde_json writes UTF-8");
            return Ok(EncodedDocument {
                data: BTreeMap::from([(CONFIGMAP_KEY.to_owned(), json)]),
                binary_data: BTreeMap::new(),
                encoding: Encoding::Plain,
                json_bytes,
                hash_key_ranges_omitted: false,
            });
        }
        First::Gzip(mut gzip) => {
            // Kept only if the member stored is this one (see below).
            gzip.keep_spans(document, &layout);
            gzip.finish()
        }
    };
    drop(layout);
    let (mut encoded, recompressed) = gzipped(document, gzip, json_bytes, false, &mut cache)?;
    let mut first_member_stored = !recompressed;
    let has_ranges = document
        .shards
        .values()
        .any(|shard| shard.hash_key_range.is_some());
    if encoded.encoded_bytes() > MAX_ENCODED_BYTES && has_ranges {
        drop(encoded);
        first_member_stored = false;
        let gzip = compressed(document, true, LEVELS[0], cache.as_deref_mut())?;
        encoded = gzipped(document, gzip, json_bytes, true, &mut cache)?.0;
    }
    if !first_member_stored && let Some(cache) = cache {
        cache.forget_spans();
    }
    let encoded_bytes = encoded.encoded_bytes();
    if encoded_bytes > MAX_ENCODED_BYTES {
        return Err(EncodeError::TooLarge {
            shards: document.shards.len(),
            pods: document.pods.len(),
            json_bytes,
            encoded_bytes,
            limit: MAX_ENCODED_BYTES,
        });
    }
    Ok(encoded)
}

/// Compression levels tried in order, until one fits: level 2 takes about
/// 60% of the time of the default level (6) for about 6% more bytes
/// (measured on 20,000 shards with `examples/document_size.rs`); only a
/// document that does not fit that way, by less than 10%, pays for the
/// default level too.
const LEVELS: [u32; 2] = [2, 6];

/// `gzip` (the document at the first level) as stored, or compressed again
/// at the next level when it does not fit but nearly does (then `true`).
fn gzipped(
    document: &AssignmentDocument,
    mut gzip: Vec<u8>,
    json_bytes: usize,
    hash_key_ranges_omitted: bool,
    cache: &mut Option<&mut EncodeCache>,
) -> Result<(EncodedDocument, bool), EncodeError> {
    let mut recompressed = false;
    for &level in &LEVELS[1..] {
        let stored = CONFIGMAP_GZIP_KEY.len() + gzip.len();
        // Fits, or so far over that a higher level (under 10% smaller)
        // cannot make it fit: either way, no second pass.
        if stored <= MAX_ENCODED_BYTES || stored > MAX_ENCODED_BYTES / 10 * 11 {
            break;
        }
        drop(gzip);
        recompressed = true;
        gzip = compressed(
            document,
            hash_key_ranges_omitted,
            level,
            cache.as_deref_mut(),
        )?;
    }
    let encoded = EncodedDocument {
        data: BTreeMap::new(),
        binary_data: BTreeMap::from([(CONFIGMAP_GZIP_KEY.to_owned(), ByteString(gzip))]),
        encoding: Encoding::Gzip,
        json_bytes,
        hash_key_ranges_omitted,
    };
    Ok((encoded, recompressed))
}

/// What the first pass over a document made of it.
enum First<'c> {
    /// Its compact JSON so far, while it is at most [`PLAIN_LIMIT_BYTES`],
    /// and where its chunks end.
    Plain { json: Vec<u8>, ends: Vec<usize> },
    /// Past that, its gzip at the first level.
    Gzip(Box<GzipChunks<'c>>),
}

impl<'c> First<'c> {
    /// Appends a chunk: to the JSON while the JSON fits
    /// [`PLAIN_LIMIT_BYTES`]; past that, the chunks held so far and this
    /// one go to gzip and the JSON is freed.
    fn chunk(
        &mut self,
        chunk: &[u8],
        cache: &mut Option<&'c mut EncodeCache>,
    ) -> std::io::Result<()> {
        match self {
            Self::Plain { json, ends } if json.len() + chunk.len() <= PLAIN_LIMIT_BYTES => {
                json.extend_from_slice(chunk);
                ends.push(json.len());
            }
            Self::Plain { json, ends } => {
                let mut gzip = GzipChunks::new(LEVELS[0], cache.take());
                let mut start = 0;
                for &end in ends.iter() {
                    gzip.chunk(&json[start..end])?;
                    start = end;
                }
                gzip.chunk(chunk)?;
                *self = Self::Gzip(Box::new(gzip));
            }
            Self::Gzip(gzip) => gzip.chunk(chunk)?,
        }
        Ok(())
    }
}

/// Serializes `document` chunk by chunk: kept as JSON while it fits
/// [`PLAIN_LIMIT_BYTES`], gzip-compressed at the first level past that,
/// with the JSON's size and where its chunks lie. Why streamed: at 20,000
/// shards the JSON is several megabytes, and holding it beside the document
/// and its gzip was the largest single allocation of a publish; one chunk
/// is held at a time.
///
/// With `changes` to the document whose spans `cache` keeps (a gzip), it
/// goes to gzip at once, taking the chunks no change touches as they were;
/// should the document turn out small enough to be stored plain, whose JSON
/// is needed whole, it is written again without them.
fn first_pass<'c, 'd>(
    document: &'d AssignmentDocument,
    cache: Option<&'c mut EncodeCache>,
    changes: Option<&'c Changes>,
) -> Result<(First<'c>, usize, Vec<Option<Span<'d>>>), EncodeError> {
    let mut cache = cache;
    if let Some(changes) = changes
        && let Some(of_base) =
            cache.take_if(|cache| cache.has_spans_of(&document.shard_group, changes.base_epoch()))
    {
        let mut gzip = GzipChunks::new(LEVELS[0], Some(of_base)).reusing(changes);
        let (json_bytes, layout) = write_laid_out(document, false, &mut gzip)?;
        if json_bytes > PLAIN_LIMIT_BYTES {
            return Ok((First::Gzip(Box::new(gzip)), json_bytes, layout));
        }
        cache = gzip.into_cache();
    }
    let mut first = First::Plain {
        json: Vec::new(),
        ends: Vec::new(),
    };
    let (json_bytes, layout) = write_laid_out(document, false, &mut |chunk: &[u8]| {
        first.chunk(chunk, &mut cache)
    })?;
    Ok((first, json_bytes, layout))
}

/// `document` (without its ranges if `omit_hash_key_ranges`) as gzip at
/// `level`, however small, streamed chunk by chunk.
fn compressed(
    document: &AssignmentDocument,
    omit_hash_key_ranges: bool,
    level: u32,
    cache: Option<&mut EncodeCache>,
) -> Result<Vec<u8>, EncodeError> {
    let mut gzip = GzipChunks::new(level, cache);
    write_chunks(document, omit_hash_key_ranges, &mut gzip)?;
    Ok(gzip.finish())
}

/// Reads the document from a ConfigMap's `data` and `binaryData` (pass
/// `config_map.data.as_ref()` and `config_map.binary_data.as_ref()`).
pub fn decode(
    data: Option<&BTreeMap<String, String>>,
    binary_data: Option<&BTreeMap<String, ByteString>>,
) -> Result<AssignmentDocument, DecodeError> {
    let plain = data
        .and_then(|d| d.get(CONFIGMAP_KEY))
        .map(|json| parse(json.as_bytes()))
        .transpose()?;
    let gzip = binary_data
        .and_then(|b| b.get(CONFIGMAP_GZIP_KEY))
        .map(|bytes| inflate(&bytes.0))
        .transpose()?;
    match (plain, gzip) {
        (Some(a), Some(b)) => Ok(if b.epoch > a.epoch { b } else { a }),
        (Some(document), None) | (None, Some(document)) => Ok(document),
        (None, None) => Err(DecodeError::Missing),
    }
}

fn inflate(gzip: &[u8]) -> Result<AssignmentDocument, DecodeError> {
    let mut json = Vec::new();
    let limit = MAX_DECODED_BYTES as u64 + 1;
    GzDecoder::new(gzip)
        .take(limit)
        .read_to_end(&mut json)
        .map_err(DecodeError::Gzip)?;
    if json.len() > MAX_DECODED_BYTES {
        return Err(DecodeError::Gzip(std::io::Error::other(
            "inflated size exceeds the limit",
        )));
    }
    parse(&json)
}

fn parse(json: &[u8]) -> Result<AssignmentDocument, DecodeError> {
    let document: AssignmentDocument = serde_json::from_slice(json)?;
    if document.api_version != ASSIGNMENT_API_VERSION || document.kind != ASSIGNMENT_KIND {
        return Err(DecodeError::UnsupportedVersion {
            api_version: document.api_version,
            kind: document.kind,
        });
    }
    Ok(document)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;
    use crate::assignment::{ShardPhase, ShardRecord};

    fn small() -> AssignmentDocument {
        let shards = BTreeMap::from([(
            "orders-0".to_owned(),
            ShardRecord {
                owner: Some("consumer-a".into()),
                state: ShardPhase::Active,
                ..Default::default()
            },
        )]);
        AssignmentDocument::from_shards("shop/orders", 3, shards, ["consumer-a".to_owned()])
    }

    #[test]
    fn small_documents_stay_plain_json() {
        let encoded = encode(&small()).unwrap();
        assert_eq!(encoded.encoding, Encoding::Plain);
        assert!(encoded.binary_data.is_empty());
        assert_eq!(
            encoded.data[CONFIGMAP_KEY],
            serde_json::to_string(&small()).unwrap()
        );
        assert_eq!(decode(Some(&encoded.data), None).unwrap(), small());
    }

    #[test]
    fn decode_prefers_the_newer_epoch_when_both_keys_exist() {
        let old = small();
        let mut new = small();
        new.epoch = 4;
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(serde_json::to_string(&new).unwrap().as_bytes())
            .unwrap();
        let binary = BTreeMap::from([(
            CONFIGMAP_GZIP_KEY.to_owned(),
            ByteString(gz.finish().unwrap()),
        )]);
        let data = BTreeMap::from([(
            CONFIGMAP_KEY.to_owned(),
            serde_json::to_string(&old).unwrap(),
        )]);
        assert_eq!(decode(Some(&data), Some(&binary)).unwrap().epoch, 4);
    }

    #[test]
    fn decode_refuses_missing_corrupt_and_foreign_documents() {
        assert!(matches!(decode(None, None), Err(DecodeError::Missing)));
        assert!(matches!(
            decode(Some(&BTreeMap::new()), Some(&BTreeMap::new())),
            Err(DecodeError::Missing)
        ));
        let corrupt = BTreeMap::from([(
            CONFIGMAP_GZIP_KEY.to_owned(),
            ByteString(b"not gzip".to_vec()),
        )]);
        assert!(matches!(
            decode(None, Some(&corrupt)),
            Err(DecodeError::Gzip(_))
        ));
        let mut foreign = small();
        foreign.api_version = "shardring.io/v2".into();
        let data = BTreeMap::from([(
            CONFIGMAP_KEY.to_owned(),
            serde_json::to_string(&foreign).unwrap(),
        )]);
        assert!(matches!(
            decode(Some(&data), None),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
        let garbage = BTreeMap::from([(CONFIGMAP_KEY.to_owned(), "{".to_owned())]);
        assert!(matches!(
            decode(Some(&garbage), None),
            Err(DecodeError::Json(_))
        ));
        // A revoke time that is not RFC 3339 (the operator never writes one).
        let mut revoking = serde_json::to_value(small()).unwrap();
        revoking["shards"]["orders-0"]["state"] = "Revoking".into();
        let data =
            |doc: &serde_json::Value| BTreeMap::from([(CONFIGMAP_KEY.to_owned(), doc.to_string())]);
        revoking["shards"]["orders-0"]["handoff"] =
            serde_json::json!({"since": "2026-11-21T12:00:00Z"});
        decode(Some(&data(&revoking)), None).unwrap();
        revoking["shards"]["orders-0"]["handoff"] = serde_json::json!({"since": "soon"});
        assert!(matches!(
            decode(Some(&data(&revoking)), None),
            Err(DecodeError::Json(_))
        ));
    }

    #[test]
    fn decode_refuses_a_gzip_bomb() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        let zeros = vec![b' '; 1024 * 1024];
        for _ in 0..(MAX_DECODED_BYTES / zeros.len() + 1) {
            gz.write_all(&zeros).unwrap();
        }
        let bomb = BTreeMap::from([(
            CONFIGMAP_GZIP_KEY.to_owned(),
            ByteString(gz.finish().unwrap()),
        )]);
        assert!(matches!(
            decode(None, Some(&bomb)),
            Err(DecodeError::Gzip(_))
        ));
    }
}
