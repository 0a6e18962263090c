//! The chunked gzip of a document's JSON, and the [`EncodeCache`] that
//! lets an encode recompress only the chunks that changed since the last
//! one (the encoding's module says what is stored where; this one owns
//! the bytes of the gzip value).
//!
//! - Chunks end between records of `pods` and `shards`, before each record
//!   whose key hashes to a boundary (one in [`RECORDS_PER_CHUNK`] on
//!   average), and after the document's head (its epoch changes every
//!   publish) and the `pods` section. A record changed, added or removed
//!   changes its own chunk only: no other boundary moves.
//! - Each chunk is deflated by a compressor reset before it and ended with
//!   a full flush (byte-aligned, no reference to earlier bytes), so its
//!   deflate bytes depend on its JSON and the level only; the stream ends
//!   with an empty final block. The trailer's CRC-32 is combined from the
//!   chunks' CRCs. Concatenated, they are one ordinary deflate stream in
//!   one gzip member: readers need nothing new.
//! - The cache keeps each chunk's JSON and deflate bytes from the last
//!   encode (a hit is a byte-equal chunk), so the output is a function of
//!   the document alone: identical with a warm, cold or no cache.
//!
//! Compared with one deflate over the whole JSON, a chunk starts without
//! the dictionary of the bytes before it and carries its own block header
//! and flush marker: at level 2, 1.1% more bytes at 20,000 shards on 5,000
//! pods, 2.3% at 5,000 on 1,000, 4.7% at 20,000 with a standby (stored
//! without the ranges: shorter records, shorter chunks). The crate's
//! `encoding` integration tests measure it and fail past 3% (7% without
//! the ranges).

use std::collections::{BTreeMap, HashMap};

use flate2::{Compress, Compression, Crc, FlushCompress};
use serde::Serialize;

use crate::assignment::AssignmentDocument;

/// On average one record in this many of `pods` and `shards` starts a
/// chunk: at 20,000 shards with their ranges (about 200 bytes of JSON
/// each) chunks of about 25 KiB. Smaller chunks recompress less per change
/// but compress worse and reset the compressor more often.
pub const RECORDS_PER_CHUNK: u64 = 128;

/// The chunks of one document's compact JSON kept by
/// [`encode_with`](super::encode_with) from
/// its last encode, for the next: each chunk's JSON (about the size of the
/// document's JSON in all) and its deflate bytes at each level used. Owned
/// by whoever encodes one document after another (the operator: one per
/// ShardGroup); it never changes what is encoded, only how long it takes.
#[derive(Clone, Default)]
pub struct EncodeCache {
    chunks: HashMap<ChunkKey, CachedChunk>,
    /// Bumped by every encode; chunks not used by the last one are dropped.
    generation: u64,
    /// The JSON size of the last encode, the next one's first allocation.
    pub(super) json_bytes: usize,
}

impl std::fmt::Debug for EncodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodeCache")
            .field("chunks", &self.chunks.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl EncodeCache {
    /// The number of chunks held.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// The bytes held: every chunk's JSON and deflate bytes.
    pub fn bytes(&self) -> usize {
        self.chunks
            .values()
            .map(|chunk| chunk.json.len() + chunk.deflate.len())
            .sum()
    }

    /// Starts an encode: what it looks up or compresses is marked as its.
    pub(super) fn begin_encode(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Ends an encode: the chunks it did not use are dropped.
    pub(super) fn end_encode(&mut self) {
        let generation = self.generation;
        self.chunks.retain(|_, chunk| chunk.used == generation);
    }
}

/// A chunk's level, CRC-32 and length: where [`EncodeCache`] looks it up
/// (a hit must also be byte-equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ChunkKey {
    level: u32,
    crc: u32,
    len: usize,
}

#[derive(Clone)]
struct CachedChunk {
    json: Box<[u8]>,
    deflate: Box<[u8]>,
    /// The generation of the last encode that used it.
    used: u64,
}

/// A document's compact JSON, exactly as `serde_json::to_vec` writes it,
/// and where its chunks end.
pub(super) struct Chunked {
    pub(super) bytes: Vec<u8>,
    /// Where each chunk ends (the last one at `bytes.len()`).
    ends: Vec<usize>,
}

impl Chunked {
    /// `document`'s JSON in chunks, written in a buffer of `capacity` bytes
    /// at first.
    pub(super) fn of(document: &AssignmentDocument, capacity: usize) -> std::io::Result<Self> {
        // Every field, so that a field added to the document cannot be
        // forgotten here (the tests compare with `serde_json::to_vec`).
        let AssignmentDocument {
            api_version,
            kind,
            shard_group,
            epoch,
            pods,
            shards,
        } = document;
        let mut json = Self {
            bytes: Vec::with_capacity(capacity.max(4096)),
            ends: Vec::new(),
        };
        json.bytes.extend_from_slice(b"{\"apiVersion\":");
        json.value(api_version)?;
        json.bytes.extend_from_slice(b",\"kind\":");
        json.value(kind)?;
        json.bytes.extend_from_slice(b",\"shardGroup\":");
        json.value(shard_group)?;
        json.bytes.extend_from_slice(b",\"epoch\":");
        json.value(epoch)?;
        json.bytes.extend_from_slice(b",\"pods\":{");
        json.end_chunk();
        json.entries(pods)?;
        json.end_chunk();
        json.bytes.extend_from_slice(b"},\"shards\":{");
        json.entries(shards)?;
        json.bytes.extend_from_slice(b"}}");
        json.end_chunk();
        Ok(json)
    }

    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.bytes, value).map_err(std::io::Error::from)
    }

    /// The entries of a map, each record whose key is a boundary starting a
    /// chunk.
    fn entries<V: Serialize>(&mut self, map: &BTreeMap<String, V>) -> std::io::Result<()> {
        for (i, (key, value)) in map.iter().enumerate() {
            if i > 0 {
                if is_boundary(key) {
                    self.end_chunk();
                }
                self.bytes.push(b',');
            }
            self.value(key)?;
            self.bytes.push(b':');
            self.value(value)?;
        }
        Ok(())
    }

    /// Ends the current chunk, unless it is empty.
    fn end_chunk(&mut self) {
        if self.ends.last().copied().unwrap_or(0) < self.bytes.len() {
            self.ends.push(self.bytes.len());
        }
    }

    fn chunks(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.bytes[start..end])
    }

    /// The JSON as one gzip member at `level`: a fixed header, the chunks'
    /// deflate bytes (from `cache` where it holds them), an empty final
    /// block, and the trailer.
    pub(super) fn gzip(
        &self,
        level: u32,
        mut cache: Option<&mut EncodeCache>,
    ) -> std::io::Result<Vec<u8>> {
        let mut gzip = Vec::with_capacity(self.bytes.len() / 4);
        gzip.extend_from_slice(&GZIP_HEADER);
        let mut crc = Crc::new();
        let mut compress = None;
        for chunk in self.chunks() {
            let mut chunk_crc = Crc::new();
            chunk_crc.update(chunk);
            let key = ChunkKey {
                level,
                crc: chunk_crc.sum(),
                len: chunk.len(),
            };
            crc.combine(&chunk_crc);
            let Some(cache) = cache.as_deref_mut() else {
                deflate_chunk(&mut compress, level, chunk, &mut gzip)?;
                continue;
            };
            let generation = cache.generation;
            match cache.chunks.get_mut(&key) {
                Some(cached) if *cached.json == *chunk => {
                    cached.used = generation;
                    gzip.extend_from_slice(&cached.deflate);
                }
                _ => {
                    let start = gzip.len();
                    deflate_chunk(&mut compress, level, chunk, &mut gzip)?;
                    let cached = CachedChunk {
                        json: chunk.into(),
                        deflate: gzip[start..].into(),
                        used: generation,
                    };
                    cache.chunks.insert(key, cached);
                }
            }
        }
        gzip.extend_from_slice(&FINAL_EMPTY_BLOCK);
        gzip.extend_from_slice(&crc.sum().to_le_bytes());
        gzip.extend_from_slice(&crc.amount().to_le_bytes());
        Ok(gzip)
    }
}

/// Whether the record of `key` starts a chunk: a stable hash of the key
/// alone (FNV-1a, mixed), so whether it does never depends on other records
/// nor on the process.
fn is_boundary(key: &str) -> bool {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key.as_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // The finalizer of splitmix64: every bit of the key moves the low bits.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^= hash >> 31;
    hash.is_multiple_of(RECORDS_PER_CHUNK)
}

/// The gzip header, the same for every document: deflate, no flags, no
/// modification time, no extra flags, unknown OS (as `flate2` writes it).
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// A final block of fixed Huffman codes holding only its end: BFINAL 1,
/// BTYPE 01, end-of-block code 0000000, padded to the byte (what zlib
/// writes when a stream ending on a flush is finished).
const FINAL_EMPTY_BLOCK: [u8; 2] = [0x03, 0x00];

/// Appends `chunk` deflated (raw deflate) at `level` to `out`, by a
/// compressor reset before it (created on first use) and ended with a full
/// flush: non-final blocks ending byte-aligned, referring to nothing
/// before, so the bytes depend on the chunk and the level alone.
fn deflate_chunk(
    compress: &mut Option<Compress>,
    level: u32,
    chunk: &[u8],
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let compress = match compress {
        Some(compress) => {
            compress.reset();
            compress
        }
        None => compress.insert(Compress::new(Compression::new(level), false)),
    };
    // Room for more than the chunk's worst case (stored blocks: 5 bytes of
    // header per 16 KiB, the flush's marker, the bits left to align), so
    // one call compresses it all and the output never ends exactly at the
    // end of the room: zlib.h, a flush that fills the output is repeated
    // by the next call (a second empty stored block), which would make the
    // bytes depend on the buffer's capacity, not on the chunk alone.
    out.reserve(chunk.len() + chunk.len() / 1024 + 64);
    let room = out.capacity() - out.len();
    let before = compress.total_in();
    compress
        .compress_vec(chunk, out, FlushCompress::Full)
        .map_err(std::io::Error::from)?;
    let consumed = compress.total_in() - before;
    if usize::try_from(consumed).ok() != Some(chunk.len()) || out.capacity() - out.len() == 0 {
        return Err(std::io::Error::other(format!(
            "deflate of a {}-byte chunk took {consumed} bytes and filled {room} bytes of room",
            chunk.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
