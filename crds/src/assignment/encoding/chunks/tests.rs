//! The chunked gzip's own tests: the JSON is exactly serde's, the gzip
//! one member any reader takes, and the bytes the same whatever the cache
//! or the output buffer held.

use std::io::Read as _;

use flate2::read::GzDecoder;

use super::*;
use crate::assignment::encoding::{Encoding, LEVELS, encode, encode_changed, encode_with};
use crate::assignment::{ShardPhase, ShardRecord};

/// A document of `shards` records owned round-robin by `pods` pods, with
/// keys JSON must escape, and every kind of field.
fn document(epoch: u64, shards: &[(String, u8)], pods: usize) -> AssignmentDocument {
    let pods: Vec<String> = (0..pods.max(1))
        .map(|i| format!("pod-\"{i}\"\u{e9}"))
        .collect();
    let records = shards
        .iter()
        .enumerate()
        .map(|(i, (id, shape))| {
            let mut record = ShardRecord {
                owner: Some(pods[i % pods.len()].clone()),
                ..Default::default()
            };
            if shape & 1 != 0 {
                record.hash_key_range = Some(Box::new(crate::assignment::HashKeyRange {
                    start: format!("{}", u128::from(*shape) << 100),
                    end: format!("{}", (u128::from(*shape) << 100) + 12345),
                }));
            }
            if shape & 2 != 0 {
                record.standbys = vec![pods[(i + 1) % pods.len()].clone()];
            }
            if shape & 4 != 0 {
                record.state = ShardPhase::Revoking;
                record.checkpoint = Some(Box::new(format!("cp\n{shape}")));
            }
            if shape & 8 != 0 {
                record.parents = vec![format!("parent-{shape}")];
            }
            (id.clone(), record)
        })
        .collect();
    AssignmentDocument::from_shards("ns/g\\\"", epoch, records, pods)
}

/// The chunks [`write_chunks`] hands over, checking the size it returns.
fn chunks_of(document: &AssignmentDocument, omit_hash_key_ranges: bool) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let written = write_chunks(document, omit_hash_key_ranges, &mut |chunk: &[u8]| {
        chunks.push(chunk.to_vec());
        Ok(())
    })
    .unwrap();
    assert_eq!(written, chunks.iter().map(Vec::len).sum::<usize>());
    chunks
}

/// `chunks` as one gzip member at `level`.
fn gzip(chunks: &[Vec<u8>], level: u32, cache: Option<&mut EncodeCache>) -> Vec<u8> {
    let mut gzip = GzipChunks::new(level, cache);
    for chunk in chunks {
        gzip.chunk(chunk).unwrap();
    }
    let len = gzip.len();
    let gzip = gzip.finish();
    assert_eq!(gzip.len(), len);
    gzip
}

fn inflated(gzip: &[u8]) -> Vec<u8> {
    let mut json = Vec::new();
    GzDecoder::new(gzip).read_to_end(&mut json).unwrap();
    json
}

#[test]
fn chunks_are_exactly_the_json_serde_writes() {
    for (shards, pods) in [(0, 0), (1, 1), (500, 7), (3_000, 40)] {
        let ids: Vec<(String, u8)> = (0..shards)
            .map(|i| (format!("shard-{i}/\u{1}"), u8::try_from(i % 16).unwrap()))
            .collect();
        let doc = document(7, &ids, pods);
        let chunks = chunks_of(&doc, false);
        let json = chunks.concat();
        assert_eq!(json, serde_json::to_vec(&doc).unwrap());
        assert!(chunks.iter().all(|chunk| !chunk.is_empty()));
        // The head is a chunk of its own; a large map is in several.
        assert!(chunks[0].ends_with(b"\"pods\":{"));
        if shards >= 3_000 {
            assert!(chunks.len() > 10, "{} chunks", chunks.len());
        }
        for level in LEVELS {
            assert_eq!(inflated(&gzip(&chunks, level, None)), json);
            let mut cache = EncodeCache::default();
            assert_eq!(inflated(&gzip(&chunks, level, Some(&mut cache))), json);
        }
        // Without the ranges: the JSON of the document without them,
        // however the records are shaped.
        let mut compact = doc.clone();
        compact
            .shards
            .values_mut()
            .for_each(|record| record.hash_key_range = None);
        assert_eq!(
            chunks_of(&doc, true).concat(),
            serde_json::to_vec(&compact).unwrap()
        );
    }
}

#[test]
fn a_chunks_bytes_do_not_depend_on_the_room_left_in_the_output() {
    // zlib.h: a flush ending exactly at the end of the output space
    // repeats its marker when called again for the rest (it did,
    // before the room reserved for the worst case).
    let ids: Vec<(String, u8)> = (0..600)
        .map(|i| (format!("s-{i}"), u8::try_from(i % 16).unwrap()))
        .collect();
    let chunks = chunks_of(&document(1, &ids, 9), false);
    for chunk in chunks.iter().take(3) {
        for level in LEVELS {
            let mut alone = Vec::new();
            deflate_chunk(&mut None, level, chunk, &mut alone).unwrap();
            for room in alone.len().saturating_sub(8)..alone.len() + 8 {
                let mut out = Vec::with_capacity(room);
                deflate_chunk(&mut None, level, chunk, &mut out).unwrap();
                assert_eq!(out, alone, "level {level}, {room} bytes of room");
            }
        }
    }
}

#[test]
fn the_gzip_is_one_member_with_a_fixed_header() {
    let ids: Vec<(String, u8)> = (0..2_000).map(|i| (format!("s-{i}"), 1)).collect();
    let chunks = chunks_of(&document(1, &ids, 30), false);
    let json = chunks.concat();
    let gzip = gzip(&chunks, LEVELS[0], None);
    assert_eq!(gzip[..10], GZIP_HEADER);
    // A single-member reader consumes every byte: nothing follows the
    // member's trailer.
    let mut decoder = GzDecoder::new(&gzip[..]);
    let mut out = Vec::new();
    decoder.read_to_end(&mut out).unwrap();
    assert_eq!(out, json);
    let mut decoder = flate2::bufread::GzDecoder::new(&gzip[..]);
    std::io::copy(&mut decoder, &mut std::io::sink()).unwrap();
    assert!(decoder.into_inner().is_empty());
    // The raw deflate stream ends exactly before the trailer.
    let mut inflate = flate2::Decompress::new(false);
    let mut raw = Vec::with_capacity(json.len() + 1);
    let status = inflate
        .decompress_vec(&gzip[10..], &mut raw, flate2::FlushDecompress::Finish)
        .unwrap();
    assert_eq!(status, flate2::Status::StreamEnd);
    assert_eq!(
        usize::try_from(inflate.total_in()).unwrap(),
        gzip.len() - 18
    );
    assert_eq!(raw, json);
}

use proptest::prelude::*;

/// A change to a document: a record set, added or removed, a pod added
/// or removed, the epoch bumped.
#[derive(Debug, Clone)]
enum Change {
    Set(usize, u8),
    Add(String, u8),
    Remove(usize),
    Pods(usize),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, shape)| Change::Set(i, shape)),
        ("[a-z0-9\"\\\\-]{1,10}", any::<u8>()).prop_map(|(id, shape)| Change::Add(id, shape)),
        any::<usize>().prop_map(Change::Remove),
        (1usize..60).prop_map(Change::Pods),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// However warm the cache, and whatever it held, the bytes are those
    /// of a cold encode, and they inflate to the JSON serde writes.
    #[test]
    fn a_warm_cache_encodes_exactly_as_a_cold_one(
        shards in 0usize..1_500,
        pods in 1usize..60,
        changes in prop::collection::vec(prop::collection::vec(change(), 1..6), 1..6),
    ) {
        let mut ids: Vec<(String, u8)> =
            (0..shards).map(|i| (format!("shard-{i:05}"), u8::try_from(i % 16).unwrap())).collect();
        let mut pods = pods;
        let mut cache = EncodeCache::default();
        let mut other = EncodeCache::default();
        for (epoch, step) in changes.into_iter().enumerate() {
            for change in step {
                match change {
                    Change::Set(i, shape) if !ids.is_empty() => {
                        let at = i % ids.len();
                        ids[at].1 = shape;
                    }
                    Change::Add(id, shape) => ids.push((id, shape)),
                    Change::Remove(i) if !ids.is_empty() => {
                        ids.remove(i % ids.len());
                    }
                    Change::Pods(count) => pods = count,
                    _ => {}
                }
            }
            let doc = document(u64::try_from(epoch).unwrap(), &ids, pods);
            let chunks = chunks_of(&doc, false);
            let json = chunks.concat();
            prop_assert_eq!(&json, &serde_json::to_vec(&doc).unwrap());
            for level in LEVELS {
                let cold = gzip(&chunks, level, None);
                prop_assert_eq!(inflated(&cold), json.clone());
                // The main cache encodes every document in turn; the
                // other one only every second (filled by other documents).
                cache.generation += 1;
                let warm = gzip(&chunks, level, Some(&mut cache));
                prop_assert_eq!(&warm, &cold);
                if epoch % 2 == 0 {
                    other.generation += 1;
                    prop_assert_eq!(&gzip(&chunks, level, Some(&mut other)), &cold);
                }
            }
            prop_assert_eq!(encode_with(&doc, &mut cache).unwrap(), encode(&doc).unwrap());
        }
    }
}

#[test]
fn the_cache_keeps_only_the_last_encode() {
    let ids: Vec<(String, u8)> = (0..40_000).map(|i| (format!("shard-{i}"), 1)).collect();
    let doc = document(1, &ids, 500);
    let mut cache = EncodeCache::default();
    let first = encode_with(&doc, &mut cache).unwrap();
    assert_eq!(first.encoding, Encoding::Gzip);
    let chunks = cache.chunks();
    assert!(chunks > 100, "{chunks}");
    // Each chunk's deflate bytes once, and no JSON: the gzip's size, the
    // map's entries, and where each chunk lies (its first key, at most
    // 11 bytes here, and its entry).
    let stored = first.binary_data[crate::assignment::CONFIGMAP_GZIP_KEY]
        .0
        .len();
    let per_chunk =
        2 * size_of::<(Fingerprint, CachedChunk)>() + 2 * size_of::<(String, SpanEntry)>() + 11;
    let bound = stored + chunks * per_chunk;
    assert!(
        cache.bytes() <= bound,
        "{} bytes held for {stored} of gzip",
        cache.bytes()
    );
    assert!(cache.bytes() >= stored - 20);
    assert!(cache.bytes() < first.json_bytes / 3);
    // A changed record and epoch: every other chunk is a hit, and the
    // cache holds this encode's chunks only.
    let mut changed = doc.clone();
    changed.epoch = 2;
    changed.shards.get_mut("shard-777").unwrap().state = ShardPhase::Revoking;
    let second = encode_with(&changed, &mut cache).unwrap();
    assert_eq!(second, encode(&changed).unwrap());
    assert_eq!(cache.chunks(), chunks);
    // A small document is plain and leaves nothing behind.
    encode_with(&document(1, &[], 1), &mut cache).unwrap();
    assert_eq!(cache.chunks(), 0);
}

/// An edit of a document's records: a shard moved to another pod, given a
/// standby, sent to revoke, added or removed (indices taken modulo the
/// shards there are).
#[derive(Debug, Clone)]
enum Edit {
    Move(usize, usize),
    Standby(usize, usize),
    Revoke(usize),
    Add(String, u8),
    Remove(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 0usize..500).prop_map(|(i, pod)| Edit::Move(i, pod)),
        (any::<usize>(), 0usize..500).prop_map(|(i, pod)| Edit::Standby(i, pod)),
        any::<usize>().prop_map(Edit::Revoke),
        ("[a-z0-9\"\\\\-]{1,12}", any::<u8>()).prop_map(|(id, shape)| Edit::Add(id, shape)),
        any::<usize>().prop_map(Edit::Remove),
    ]
}

/// `doc` with `edits` applied to its records, its pods reindexed.
fn edited(doc: &AssignmentDocument, edits: &[Edit]) -> AssignmentDocument {
    let mut next = doc.clone();
    next.epoch += 1;
    for edit in edits {
        let nth = |next: &AssignmentDocument, i: usize| {
            next.shards.keys().nth(i % next.shards.len()).cloned()
        };
        match edit {
            Edit::Move(i, pod) | Edit::Standby(i, pod) if !next.shards.is_empty() => {
                let id = nth(&next, *i).expect("not empty");
                let record = next.shards.get_mut(&id).expect("listed");
                let pod = format!("pod-\"{pod}\"\u{e9}");
                if matches!(edit, Edit::Move(..)) {
                    record.owner = Some(pod);
                } else if record.owner.as_ref() != Some(&pod) {
                    record.standbys = vec![pod];
                }
            }
            Edit::Revoke(i) if !next.shards.is_empty() => {
                let id = nth(&next, *i).expect("not empty");
                next.shards.get_mut(&id).expect("listed").state = ShardPhase::Revoking;
            }
            Edit::Remove(i) if !next.shards.is_empty() => {
                let id = nth(&next, *i).expect("not empty");
                next.shards.remove(&id);
            }
            Edit::Add(id, shape) => {
                let template = document(0, &[(id.clone(), *shape)], 3);
                next.shards.extend(template.shards);
            }
            _ => {}
        }
    }
    next.reindex_pods();
    next.pods.retain(|_, lists| !lists.is_empty());
    next
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// An encode of changes to the cache's last document gives exactly the
    /// bytes of a cold encode, whatever the changes: records moved, added
    /// or removed (chunk boundaries come and go), pods gone or new; with a
    /// list of changes longer than needed; and with the changes to another
    /// document than the cache's (it then encodes it whole).
    #[test]
    fn an_encode_of_changes_is_exactly_a_cold_encode(
        shards in 5_000usize..6_500,
        steps in prop::collection::vec(prop::collection::vec(edit(), 1..8), 1..5),
        extra in prop::collection::vec("[a-z0-9-]{1,12}", 0..3),
    ) {
        let ids: Vec<(String, u8)> =
            (0..shards).map(|i| (format!("shard-{i:05}"), u8::try_from(i % 16).unwrap())).collect();
        let mut doc = document(1, &ids, 500);
        doc.pods.retain(|_, lists| !lists.is_empty());
        let mut cache = EncodeCache::default();
        prop_assert_eq!(encode_with(&doc, &mut cache).unwrap().encoding, Encoding::Gzip);
        for (n, step) in steps.iter().enumerate() {
            let next = edited(&doc, step);
            let found = Changes::between(&doc, &next);
            let pods = found.pods().iter().cloned().chain(extra.clone());
            let shards = found.shards().iter().cloned().chain(extra.clone());
            // Every third step, changes to a document the cache did not encode.
            let base = if n % 3 == 2 { doc.epoch + 7 } else { doc.epoch };
            let changes = Changes::new(base, pods, shards);
            let encoded = encode_changed(&next, &mut cache, &changes).unwrap();
            prop_assert_eq!(&encoded, &encode(&next).unwrap());
            prop_assert_eq!(inflated(&encoded.binary_data[crate::assignment::CONFIGMAP_GZIP_KEY].0), serde_json::to_vec(&next).unwrap());
            doc = next;
        }
    }
}

/// A sink that counts the chunks whose JSON is written, passing everything
/// on to a gzip member.
struct Counting<'g, 'c> {
    gzip: &'g mut GzipChunks<'c>,
    written: usize,
}

impl ChunkSink for Counting<'_, '_> {
    fn json(&mut self, json: &[u8]) -> std::io::Result<()> {
        self.written += 1;
        self.gzip.json(json)
    }

    fn unchanged(&mut self, span: &Span<'_>) -> Option<usize> {
        self.gzip.unchanged(span)
    }
}

#[test]
fn an_encode_of_one_changed_record_writes_the_json_of_its_chunks_only() {
    let ids: Vec<(String, u8)> = (0..40_000).map(|i| (format!("shard-{i}"), 1)).collect();
    let mut doc = document(1, &ids, 500);
    doc.pods.retain(|_, lists| !lists.is_empty());
    let mut cache = EncodeCache::default();
    encode_with(&doc, &mut cache).unwrap();
    let chunks = cache.chunks();
    // One shard sent to revoke: its record, and its owner's lists.
    let next = edited(&doc, &[Edit::Revoke(777)]);
    let changes = Changes::between(&doc, &next);
    assert_eq!(changes.pods.len() + changes.shards.len(), 2);
    cache.begin_encode();
    let mut gzip = GzipChunks::new(LEVELS[0], Some(&mut cache)).reusing(&changes);
    let mut counting = Counting {
        gzip: &mut gzip,
        written: 0,
    };
    let (json_bytes, layout) = write_laid_out(&next, false, &mut counting).unwrap();
    // The head, the owner's chunk of pods, the shard's chunk of shards.
    assert_eq!(counting.written, 3, "of {chunks} chunks");
    assert_eq!(layout.len(), chunks);
    assert_eq!(json_bytes, serde_json::to_vec(&next).unwrap().len());
    let member = gzip.finish();
    cache.end_encode();
    assert_eq!(inflated(&member), serde_json::to_vec(&next).unwrap());
}

/// A key that starts a chunk, made of `prefix` and a number.
fn boundary_key(prefix: &str) -> String {
    (0..)
        .map(|n| format!("{prefix}{n}"))
        .find(|key| is_boundary(key))
        .expect("one in RECORDS_PER_CHUNK keys is a boundary")
}

#[test]
fn a_chunk_added_before_or_after_a_section_changes_its_neighbour_too() {
    let ids: Vec<(String, u8)> = (0..6_000).map(|i| (format!("shard-{i}"), 1)).collect();
    let mut doc = document(1, &ids, 500);
    // The sections' first keys start chunks of their own (as every key
    // after them may).
    doc.shards.insert(
        boundary_key("b-"),
        ShardRecord {
            owner: Some(boundary_key("b-pod-")),
            ..Default::default()
        },
    );
    doc.reindex_pods();
    doc.pods.retain(|_, lists| !lists.is_empty());
    // A shard and an owner sorting before every other key, then after,
    // each starting a chunk of its own: the chunk that started (ended) the
    // section no longer does, and its bytes change though its records
    // do not.
    for (shard, pod) in [
        (boundary_key("a-"), boundary_key("a-pod-")),
        (boundary_key("z-"), boundary_key("z-pod-")),
    ] {
        let mut cache = EncodeCache::default();
        encode_with(&doc, &mut cache).unwrap();
        let mut next = doc.clone();
        next.epoch += 1;
        next.shards.insert(
            shard.clone(),
            ShardRecord {
                owner: Some(pod.clone()),
                ..Default::default()
            },
        );
        next.reindex_pods();
        let changes = Changes::new(1, [pod], [shard]);
        assert_eq!(
            encode_changed(&next, &mut cache, &changes).unwrap(),
            encode(&next).unwrap()
        );
    }
}
