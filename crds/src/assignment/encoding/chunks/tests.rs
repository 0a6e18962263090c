//! The chunked gzip's own tests: the JSON is exactly serde's, the gzip
//! one member any reader takes, and the bytes the same whatever the cache
//! or the output buffer held.

use std::io::Read as _;

use flate2::read::GzDecoder;

use super::*;
use crate::assignment::encoding::{Encoding, LEVELS, encode, encode_with};
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
    let written = write_chunks(document, omit_hash_key_ranges, &mut |chunk| {
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
    // Each chunk's deflate bytes once, and no JSON: the gzip's size and
    // the map's entries.
    let stored = first.binary_data[crate::assignment::CONFIGMAP_GZIP_KEY]
        .0
        .len();
    let bound = stored + chunks * 2 * size_of::<(Fingerprint, CachedChunk)>();
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
