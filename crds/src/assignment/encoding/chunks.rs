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
//! - The JSON is written one chunk at a time ([`write_chunks`]): an encode
//!   holds one chunk's JSON (tens of KiB), never the document's (4.5 MB at
//!   20,000 shards), except while the whole JSON may still be stored plain
//!   (at most 768 KiB).
//! - The cache keeps, per chunk of the last encode, its deflate bytes
//!   under a fingerprint of its JSON (level, length, CRC-32 and the
//!   128-bit XXH3, [`Fingerprint`]), not the JSON itself: its size is
//!   about the gzip's. A hit is a chunk of equal fingerprint, so the output
//!   is a function of the document alone, identical with a warm, cold or
//!   no cache, unless two different chunks of equal length have equal
//!   fingerprints (see [`Fingerprint`] for how unlikely).
//!
//! - The cache also keeps where each chunk of its last encode lies (its
//!   section, first key, number of records and whether it starts or ends
//!   its section, [`Span`]). An encode told what changed since that
//!   document ([`Changes`]) takes every chunk whose span is the same and
//!   holds no changed key as it was, without writing its JSON: a chunk's
//!   JSON is a function of its span and its records alone. So a pod event
//!   that changes a few records of 20,000 writes and hashes the JSON of a
//!   few chunks, not of the whole document.
//!
//! Compared with one deflate over the whole JSON, a chunk starts without
//! the dictionary of the bytes before it and carries its own block header
//! and flush marker: at level 2, 1.1% more bytes at 20,000 shards on 5,000
//! pods, 2.3% at 5,000 on 1,000, 4.7% at 20,000 with a standby (stored
//! without the ranges: shorter records, shorter chunks). The crate's
//! `encoding` integration tests measure it and fail past 3% (7% without
//! the ranges).

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher as _;

use crc32fast::Hasher as Crc32;
use flate2::{Compress, Compression, FlushCompress};
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_128_with_seed;

use crate::assignment::{AssignmentDocument, ShardRecord};

/// On average one record in this many of `pods` and `shards` starts a
/// chunk: at 20,000 shards with their ranges (about 200 bytes of JSON
/// each) chunks of about 25 KiB. Smaller chunks recompress less per change
/// but compress worse and reset the compressor more often.
pub const RECORDS_PER_CHUNK: u64 = 128;

/// The chunks of the gzip of the last document encoded by
/// [`encode_with`](super::encode_with), for the next: each chunk's deflate
/// bytes at each level used, under a fingerprint of its JSON; no
/// JSON (about the gzip's size in all, 871 KB at 20,000 shards on 5,000
/// pods). Owned by whoever encodes one document after another (the
/// operator: one per ShardGroup); it never changes what is encoded, only
/// how long it takes.
#[derive(Clone)]
pub struct EncodeCache {
    chunks: HashMap<Fingerprint, CachedChunk>,
    /// Bumped by every encode; chunks not used by the last one are dropped.
    generation: u64,
    /// The seed of the fingerprints' XXH3, random per cache: which JSON
    /// collides cannot be chosen without knowing it.
    seed: u64,
    /// Where the chunks of the last encode lie, when it was stored as gzip
    /// at the first level with its ranges.
    spans: Spans,
}

impl Default for EncodeCache {
    fn default() -> Self {
        Self {
            chunks: HashMap::new(),
            generation: 0,
            seed: std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64),
            spans: Spans::default(),
        }
    }
}

/// Where each chunk of records of one encoded document lies, by section
/// and first key, with its fingerprint.
#[derive(Clone, Default)]
struct Spans {
    /// The document they are of: its group and epoch.
    of: Option<(String, u64)>,
    pods: HashMap<String, SpanEntry>,
    shards: HashMap<String, SpanEntry>,
}

impl Spans {
    fn section(&self, section: Section) -> &HashMap<String, SpanEntry> {
        match section {
            Section::Pods => &self.pods,
            Section::Shards => &self.shards,
        }
    }

    /// The chunk kept for `span`, when one of the same span was encoded.
    fn get(&self, span: &Span<'_>) -> Option<&SpanEntry> {
        self.section(span.section)
            .get(span.first_key)
            .filter(|entry| {
                entry.keys == span.keys
                    && entry.starts_section == span.starts_section
                    && entry.ends_section == span.next_key.is_none()
            })
    }
}

/// One chunk of the last encode: its span less its first key (the key it
/// is kept under), and its fingerprint.
#[derive(Debug, Clone, Copy)]
struct SpanEntry {
    keys: usize,
    starts_section: bool,
    ends_section: bool,
    fingerprint: Fingerprint,
}

/// Which map of the document a chunk's records are from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Pods,
    Shards,
}

/// Where a chunk of records lies in its section of the document: its
/// first key, the first key of the section's next chunk (none: it ends the
/// section), how many records it holds, and whether it starts the section
/// (the first chunk of `shards` carries the text before them, the last the
/// text after). A chunk's JSON is a function of its span and the records
/// in it, nothing else.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span<'d> {
    section: Section,
    first_key: &'d str,
    next_key: Option<&'d str>,
    keys: usize,
    starts_section: bool,
}

/// What changed between the document an [`EncodeCache`] last encoded (the
/// base) and the next one: the base's epoch, and the keys of the pods and
/// shards whose records were changed, added or removed (the head, which
/// holds the epoch, is always written anew).
///
/// Given to [`encode_changed`](super::encode_changed), which takes every
/// chunk of the base that holds none of these keys as it was: a key left
/// out makes its chunk keep the base's bytes, so the caller must know the
/// list is complete (the plan step builds it from the records it put in
/// place of the base's, and only for the base it encoded last).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    base_epoch: u64,
    pods: Vec<String>,
    shards: Vec<String>,
}

impl Changes {
    /// The changes to the document at `base_epoch` that the cache encoded
    /// last: the pods and the shards whose records differ (in any order,
    /// repeats allowed).
    pub fn new(
        base_epoch: u64,
        pods: impl IntoIterator<Item = String>,
        shards: impl IntoIterator<Item = String>,
    ) -> Self {
        let sorted = |keys: &mut Vec<String>| {
            keys.sort_unstable();
            keys.dedup();
        };
        let mut pods: Vec<String> = pods.into_iter().collect();
        let mut shards: Vec<String> = shards.into_iter().collect();
        sorted(&mut pods);
        sorted(&mut shards);
        Self {
            base_epoch,
            pods,
            shards,
        }
    }

    /// The changes from `base` to `next` found by comparing every record
    /// of both (a caller that knows what it changed names it with
    /// [`new`](Self::new) instead, without the comparison).
    pub fn between(base: &AssignmentDocument, next: &AssignmentDocument) -> Self {
        fn differing<V: PartialEq>(
            a: &BTreeMap<String, V>,
            b: &BTreeMap<String, V>,
        ) -> Vec<String> {
            a.keys()
                .chain(b.keys())
                .filter(|key| a.get(*key) != b.get(*key))
                .cloned()
                .collect()
        }
        Self::new(
            base.epoch,
            differing(&base.pods, &next.pods),
            differing(&base.shards, &next.shards),
        )
    }

    /// The epoch of the document the changes are to.
    pub fn base_epoch(&self) -> u64 {
        self.base_epoch
    }

    /// The pods whose lists changed, sorted.
    pub fn pods(&self) -> &[String] {
        &self.pods
    }

    /// The shards whose records changed, sorted.
    pub fn shards(&self) -> &[String] {
        &self.shards
    }

    /// Whether a changed key lies within `span`: from its first key to
    /// the next chunk's (or the section's end). A key removed there counts
    /// as much as one changed or added.
    fn touch(&self, span: &Span<'_>) -> bool {
        let keys = match span.section {
            Section::Pods => &self.pods,
            Section::Shards => &self.shards,
        };
        let from = keys.partition_point(|key| key.as_str() < span.first_key);
        keys.get(from)
            .is_some_and(|key| span.next_key.is_none_or(|next| key.as_str() < next))
    }
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

    /// The bytes held: every chunk's deflate bytes, its entry in the map
    /// and the map's empty slots (not the allocator's rounding).
    pub fn bytes(&self) -> usize {
        let deflate: usize = self.chunks.values().map(|chunk| chunk.deflate.len()).sum();
        let spans: usize = [&self.spans.pods, &self.spans.shards]
            .into_iter()
            .map(|spans| {
                spans.keys().map(String::len).sum::<usize>()
                    + spans.capacity() * size_of::<(String, SpanEntry)>()
            })
            .sum();
        deflate + self.chunks.capacity() * size_of::<(Fingerprint, CachedChunk)>() + spans
    }

    /// Whether the spans kept are those of the document of `shard_group`
    /// at `epoch`: an encode of changes to it may take chunks as they were.
    pub(super) fn has_spans_of(&self, shard_group: &str, epoch: u64) -> bool {
        self.spans
            .of
            .as_ref()
            .is_some_and(|(group, of)| group == shard_group && *of == epoch)
    }

    /// Keeps where the chunks of `document` lie, laid out as `layout` (one
    /// entry per chunk of its member, whose fingerprints are `member`, none
    /// for the head and for a chunk of no records): the spans the next
    /// encode of changes to it compares with.
    fn keep_spans(
        &mut self,
        document: &AssignmentDocument,
        layout: &[Option<Span<'_>>],
        member: &[Fingerprint],
    ) {
        self.forget_spans();
        debug_assert_eq!(layout.len(), member.len(), "a span per chunk");
        for (span, fingerprint) in layout.iter().zip(member) {
            let Some(span) = span else { continue };
            let entry = SpanEntry {
                keys: span.keys,
                starts_section: span.starts_section,
                ends_section: span.next_key.is_none(),
                fingerprint: *fingerprint,
            };
            let spans = match span.section {
                Section::Pods => &mut self.spans.pods,
                Section::Shards => &mut self.spans.shards,
            };
            spans.insert(span.first_key.to_owned(), entry);
        }
        self.spans.of = Some((document.shard_group.clone(), document.epoch));
    }

    /// Forgets the spans kept: the last encode was not stored as the
    /// first level's gzip with ranges, which is what an encode of changes
    /// makes first.
    pub(super) fn forget_spans(&mut self) {
        self.spans = Spans::default();
    }

    /// Starts an encode: what it looks up or compresses is marked as its.
    pub(super) fn begin_encode(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Ends an encode: the chunks it did not use are dropped.
    pub(super) fn end_encode(&mut self) {
        let generation = self.generation;
        self.chunks.retain(|_, chunk| chunk.used == generation);
        // A document that shrank (or went plain) leaves no empty slots
        // behind: the map is a few KiB, the entries' bytes are freed above.
        if self.chunks.capacity() > 2 * self.chunks.len() + 16 {
            self.chunks.shrink_to_fit();
        }
    }
}

/// What [`EncodeCache`] looks a chunk up by: the level, and the chunk's
/// JSON length, CRC-32 and 128-bit XXH3 (seeded per cache). A hit is
/// taken for the same JSON without comparing bytes (the cache has none):
/// two different chunks of the same length would need equal CRC-32 and
/// equal 128-bit hashes, for unrelated JSON a chance of about 2^-128 per
/// pair compared (under 10^-33 per encode of a few hundred chunks against
/// a few hundred cached). That collision is the only way a cache changes
/// the bytes (the chunk would carry the other chunk's deflate bytes).
/// XXH3 is not a cryptographic hash, but its seed is random per cache and
/// never leaves the process, so names chosen to collide would have to be
/// chosen without knowing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Fingerprint {
    level: u32,
    crc: u32,
    len: usize,
    hash: u128,
}

#[derive(Clone)]
struct CachedChunk {
    deflate: Box<[u8]>,
    /// The generation of the last encode that used it.
    used: u64,
}

/// Writes `document`'s compact JSON, exactly as `serde_json::to_vec`
/// writes it (`hashKeyRange` left out of every shard when
/// `omit_hash_key_ranges`), to `sink` one chunk at a time, each once it is
/// complete (never empty), from a buffer of one chunk; returns the JSON's
/// size.
pub(super) fn write_chunks(
    document: &AssignmentDocument,
    omit_hash_key_ranges: bool,
    sink: &mut dyn ChunkSink,
) -> std::io::Result<usize> {
    write_laid_out(document, omit_hash_key_ranges, sink).map(|(written, _)| written)
}

/// [`write_chunks`], with where each chunk lies (in order, one entry per
/// chunk handed over or taken as it was; none for the head and for a chunk
/// of no records). A chunk the sink takes unchanged ([`ChunkSink::unchanged`])
/// is not written.
pub(super) fn write_laid_out<'d>(
    document: &'d AssignmentDocument,
    omit_hash_key_ranges: bool,
    sink: &mut dyn ChunkSink,
) -> std::io::Result<(usize, Vec<Option<Span<'d>>>)> {
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
    let mut json = ChunkWriter {
        chunk: Vec::with_capacity(CHUNK_BUFFER_BYTES),
        sink,
        written: 0,
        layout: Vec::new(),
    };
    json.chunk.extend_from_slice(b"{\"apiVersion\":");
    json.value(api_version)?;
    json.chunk.extend_from_slice(b",\"kind\":");
    json.value(kind)?;
    json.chunk.extend_from_slice(b",\"shardGroup\":");
    json.value(shard_group)?;
    json.chunk.extend_from_slice(b",\"epoch\":");
    json.value(epoch)?;
    json.chunk.extend_from_slice(b",\"pods\":{");
    json.end_chunk(None)?;
    json.section(Section::Pods, pods, (b"", b""), |json, value| {
        json.value(value)
    })?;
    json.section(
        Section::Shards,
        shards,
        (b"},\"shards\":{", b"}}"),
        |json, record: &ShardRecord| {
            if omit_hash_key_ranges && record.hash_key_range.is_some() {
                let mut record = record.clone();
                record.hash_key_range = None;
                json.value(&record)
            } else {
                json.value(record)
            }
        },
    )?;
    Ok((json.written, json.layout))
}

/// Where the chunks of JSON go.
pub(super) trait ChunkSink {
    /// A complete chunk.
    fn json(&mut self, json: &[u8]) -> std::io::Result<()>;

    /// Takes the chunk of `span` as the last encode had it, when it is
    /// known unchanged (its JSON then is not written): its JSON's length.
    fn unchanged(&mut self, _span: &Span<'_>) -> Option<usize> {
        None
    }
}

impl<F: FnMut(&[u8]) -> std::io::Result<()>> ChunkSink for F {
    fn json(&mut self, json: &[u8]) -> std::io::Result<()> {
        self(json)
    }
}

/// The first capacity of the chunk buffer: about two average chunks at
/// 20,000 shards with their ranges (it grows to the largest chunk).
const CHUNK_BUFFER_BYTES: usize = 64 * 1024;

/// The chunk being written, where complete chunks go, and where each lay.
struct ChunkWriter<'s, 'd> {
    chunk: Vec<u8>,
    sink: &'s mut dyn ChunkSink,
    written: usize,
    layout: Vec<Option<Span<'d>>>,
}

impl<'d> ChunkWriter<'_, 'd> {
    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.chunk, value).map_err(std::io::Error::from)
    }

    /// The entries of a map between the section's `(before, after)` text,
    /// each value written by `value`, each record whose key is a boundary
    /// starting a chunk; a chunk the sink takes unchanged is skipped.
    fn section<V>(
        &mut self,
        section: Section,
        map: &'d BTreeMap<String, V>,
        (before, after): (&[u8], &[u8]),
        value: impl Fn(&mut Self, &V) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        // Where each chunk starts: the first record, then each boundary.
        let starts: Vec<(usize, &'d str)> = map
            .keys()
            .enumerate()
            .filter(|(i, key)| *i == 0 || is_boundary(key))
            .map(|(i, key)| (i, key.as_str()))
            .collect();
        if starts.is_empty() {
            self.chunk.extend_from_slice(before);
            self.chunk.extend_from_slice(after);
            return self.end_chunk(None);
        }
        let mut entries = map.iter();
        for (n, &(start, first_key)) in starts.iter().enumerate() {
            let next = starts.get(n + 1);
            let span = Span {
                section,
                first_key,
                next_key: next.map(|&(_, key)| key),
                keys: next.map_or(map.len(), |&(end, _)| end) - start,
                starts_section: n == 0,
            };
            if let Some(len) = self.sink.unchanged(&span) {
                entries.nth(span.keys - 1);
                self.written += len;
                self.layout.push(Some(span));
                continue;
            }
            if span.starts_section {
                self.chunk.extend_from_slice(before);
            }
            for (i, (key, record)) in entries.by_ref().take(span.keys).enumerate() {
                if i > 0 || !span.starts_section {
                    self.chunk.push(b',');
                }
                self.value(key)?;
                self.chunk.push(b':');
                value(self, record)?;
            }
            if span.next_key.is_none() {
                self.chunk.extend_from_slice(after);
            }
            self.end_chunk(Some(span))?;
        }
        Ok(())
    }

    /// Ends the current chunk, of `span`, unless it is empty: hands it to
    /// the sink.
    fn end_chunk(&mut self, span: Option<Span<'d>>) -> std::io::Result<()> {
        if !self.chunk.is_empty() {
            self.written += self.chunk.len();
            self.sink.json(&self.chunk)?;
            self.chunk.clear();
            self.layout.push(span);
        }
        Ok(())
    }
}

/// A gzip member being written chunk by chunk at one level: a fixed
/// header, the chunks' deflate bytes (from the cache where it holds them),
/// an empty final block, and the trailer.
pub(super) struct GzipChunks<'c> {
    level: u32,
    cache: Option<&'c mut EncodeCache>,
    /// What changed since the document the cache holds the spans of: its
    /// chunks that none of it touches are taken as they were.
    changes: Option<&'c Changes>,
    /// Without a cache, the member so far. With one, empty until
    /// [`finish`](Self::finish): the chunks' bytes are in the cache, and
    /// are copied once into a buffer of the member's exact size.
    gzip: Vec<u8>,
    /// With a cache, the member's chunks in order.
    fingerprints: Vec<Fingerprint>,
    /// The deflate bytes of the chunk being compressed.
    scratch: Vec<u8>,
    deflate_bytes: usize,
    /// The CRC-32 of the JSON so far, and its length.
    crc: Crc32,
    json_bytes: u64,
    compress: Option<Compress>,
}

impl<'c> GzipChunks<'c> {
    pub(super) fn new(level: u32, cache: Option<&'c mut EncodeCache>) -> Self {
        let mut gzip = Vec::new();
        if cache.is_none() {
            gzip.extend_from_slice(&GZIP_HEADER);
        }
        Self {
            level,
            cache,
            changes: None,
            gzip,
            fingerprints: Vec::new(),
            scratch: Vec::new(),
            deflate_bytes: 0,
            crc: Crc32::new(),
            json_bytes: 0,
            compress: None,
        }
    }

    /// This member, taking the chunks of the cache's spans that `changes`
    /// leaves alone as they were (see [`ChunkSink::unchanged`]).
    pub(super) fn reusing(mut self, changes: &'c Changes) -> Self {
        self.changes = Some(changes);
        self
    }

    /// The cache, given back unused by a member not finished.
    pub(super) fn into_cache(self) -> Option<&'c mut EncodeCache> {
        self.cache
    }

    /// Appends a chunk of JSON.
    pub(super) fn chunk(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        let mut chunk_crc = Crc32::new();
        chunk_crc.update(chunk);
        self.crc.combine(&chunk_crc);
        self.json_bytes += chunk.len() as u64;
        let Some(cache) = self.cache.as_deref_mut() else {
            // Through the scratch buffer, not straight into the member:
            // the room a chunk's worst case needs (its JSON's size) would
            // grow the member's buffer to twice the gzip's size at the end.
            self.scratch.clear();
            deflate_chunk(&mut self.compress, self.level, chunk, &mut self.scratch)?;
            self.gzip.extend_from_slice(&self.scratch);
            self.deflate_bytes += self.scratch.len();
            return Ok(());
        };
        let fingerprint = Fingerprint {
            level: self.level,
            crc: chunk_crc.finalize(),
            len: chunk.len(),
            hash: xxh3_128_with_seed(chunk, cache.seed),
        };
        let generation = cache.generation;
        let deflate_len = match cache.chunks.get_mut(&fingerprint) {
            Some(cached) => {
                cached.used = generation;
                cached.deflate.len()
            }
            None => {
                self.scratch.clear();
                deflate_chunk(&mut self.compress, self.level, chunk, &mut self.scratch)?;
                let cached = CachedChunk {
                    deflate: self.scratch.as_slice().into(),
                    used: generation,
                };
                cache.chunks.insert(fingerprint, cached);
                self.scratch.len()
            }
        };
        self.deflate_bytes += deflate_len;
        self.fingerprints.push(fingerprint);
        Ok(())
    }

    /// The size the member will have.
    pub(super) fn len(&self) -> usize {
        GZIP_HEADER.len() + self.deflate_bytes + FINAL_EMPTY_BLOCK.len() + 8
    }

    /// Has the cache keep where this member's chunks lie in `document`,
    /// laid out as `layout` (see [`write_laid_out`]).
    pub(super) fn keep_spans(
        &mut self,
        document: &AssignmentDocument,
        layout: &[Option<Span<'_>>],
    ) {
        if let Some(cache) = self.cache.as_deref_mut() {
            cache.keep_spans(document, layout, &self.fingerprints);
        }
    }

    /// The whole member.
    pub(super) fn finish(self) -> Vec<u8> {
        let len = self.len();
        let mut gzip = self.gzip;
        if let Some(cache) = self.cache {
            gzip = Vec::with_capacity(len);
            gzip.extend_from_slice(&GZIP_HEADER);
            for fingerprint in &self.fingerprints {
                gzip.extend_from_slice(&cache.chunks[fingerprint].deflate);
            }
        }
        gzip.extend_from_slice(&FINAL_EMPTY_BLOCK);
        gzip.extend_from_slice(&self.crc.finalize().to_le_bytes());
        // ISIZE: the JSON's length modulo 2^32 (RFC 1952).
        let isize =
            u32::try_from(self.json_bytes & u64::from(u32::MAX)).expect("masked to 32 bits");
        gzip.extend_from_slice(&isize.to_le_bytes());
        debug_assert_eq!(gzip.len(), len);
        gzip
    }
}

impl ChunkSink for GzipChunks<'_> {
    fn json(&mut self, json: &[u8]) -> std::io::Result<()> {
        self.chunk(json)
    }

    /// The chunk the cache's spans hold for `span`, at this level, when no
    /// change touches it: every record in it is the one it encoded, in the
    /// same place of its section, so its JSON is the one fingerprinted.
    fn unchanged(&mut self, span: &Span<'_>) -> Option<usize> {
        let changes = self.changes?;
        let cache = self.cache.as_deref_mut()?;
        let entry = *cache.spans.get(span)?;
        if entry.fingerprint.level != self.level || changes.touch(span) {
            return None;
        }
        let cached = cache.chunks.get_mut(&entry.fingerprint)?;
        cached.used = cache.generation;
        self.deflate_bytes += cached.deflate.len();
        let len = entry.fingerprint.len;
        self.crc.combine(&Crc32::new_with_initial_len(
            entry.fingerprint.crc,
            len as u64,
        ));
        self.json_bytes += len as u64;
        self.fingerprints.push(entry.fingerprint);
        Some(len)
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
