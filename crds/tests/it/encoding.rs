//! Size limits of the published document: a 20,000-shard, 5,000-pod group
//! round-trips through the ConfigMap encoding under the 1 MiB object limit
//! (raw bytes counted, as the API server's ConfigMap validation does), and a group that cannot fit is refused with a clear error
//! instead of being truncated.

use std::collections::BTreeMap;

use shardring_crds::assignment::encoding::{
    EncodeCache, EncodeError, Encoding, MAX_ENCODED_BYTES, decode, encode, encode_with,
};
use shardring_crds::assignment::{CONFIGMAP_GZIP_KEY, CONFIGMAP_KEY};
use shardring_crds::{AssignmentDocument, ShardPhase, ShardRecord};

use crate::common::fixtures::{Rng, kinesis_document};

#[test]
fn twenty_thousand_shards_on_five_thousand_pods_fit_and_round_trip() {
    let document = kinesis_document(20_000, 5_000, 1);
    let encoded = encode(&document).expect("20k shards must fit");
    assert_eq!(encoded.encoding, Encoding::Gzip);
    assert!(encoded.data.is_empty());
    assert!(encoded.binary_data.contains_key(CONFIGMAP_GZIP_KEY));
    let size = encoded.encoded_bytes();
    assert!(
        size < MAX_ENCODED_BYTES,
        "{size} bytes must stay under {MAX_ENCODED_BYTES}"
    );
    assert!(size < 1_048_576 - 64 * 1024);

    let decoded = decode(Some(&encoded.data), Some(&encoded.binary_data)).unwrap();
    assert_eq!(decoded.epoch, document.epoch);
    assert_eq!(decoded.pods, document.pods, "every pod's lists survive");
    assert_eq!(decoded.shards.len(), 20_000);
    // The hash key ranges are what had to go; everything else is intact.
    let mut expected = document.clone();
    if encoded.hash_key_ranges_omitted {
        expected
            .shards
            .values_mut()
            .for_each(|s| s.hash_key_range = None);
    }
    assert_eq!(decoded, expected);
    // Deterministic: the same document encodes to the same bytes (no-op apply).
    assert_eq!(encode(&document).unwrap(), encoded);
}

#[test]
fn twenty_thousand_shards_without_standbys_keep_their_hash_key_ranges() {
    let document = kinesis_document(20_000, 5_000, 0);
    let encoded = encode(&document).expect("20k shards must fit");
    assert_eq!(encoded.encoding, Encoding::Gzip);
    assert!(!encoded.hash_key_ranges_omitted);
    assert!(encoded.encoded_bytes() < MAX_ENCODED_BYTES);
    assert_eq!(decode(None, Some(&encoded.binary_data)).unwrap(), document);
}

#[test]
fn mid_sized_documents_keep_their_hash_key_ranges_in_gzip() {
    let document = kinesis_document(4_000, 400, 0);
    let encoded = encode(&document).unwrap();
    assert_eq!(encoded.encoding, Encoding::Gzip);
    assert!(!encoded.hash_key_ranges_omitted);
    assert_eq!(decode(None, Some(&encoded.binary_data)).unwrap(), document);
}

#[test]
fn small_documents_are_plain_json_in_data() {
    let document = kinesis_document(500, 50, 1);
    let encoded = encode(&document).unwrap();
    assert_eq!(encoded.encoding, Encoding::Plain);
    assert!(encoded.binary_data.is_empty());
    let json = &encoded.data[CONFIGMAP_KEY];
    assert_eq!(
        serde_json::from_str::<AssignmentDocument>(json).unwrap(),
        document
    );
    assert_eq!(decode(Some(&encoded.data), None).unwrap(), document);
}

#[test]
fn an_oversize_document_is_refused_not_truncated() {
    // Random 40-character shard ids barely compress: ~60,000 of them cannot fit.
    let mut rng = Rng::new(7);
    let pods: Vec<String> = (0..2_000)
        .map(|_| format!("consumer-{}", rng.suffix(20)))
        .collect();
    let shards: BTreeMap<String, ShardRecord> = (0..60_000)
        .map(|i| {
            let owner = pods[i % pods.len()].clone();
            (
                rng.suffix(40),
                ShardRecord {
                    owner: Some(owner),
                    state: ShardPhase::Active,
                    ..Default::default()
                },
            )
        })
        .collect();
    let document = AssignmentDocument::from_shards("prod/huge", 9, shards, pods);
    let error = encode(&document).expect_err("must not fit");
    // A cache changes nothing of the refusal, cold or warm (the second
    // encode hits every chunk of the first).
    let mut cache = EncodeCache::default();
    for _ in 0..2 {
        let cached = encode_with(&document, &mut cache).expect_err("must not fit");
        assert_eq!(cached.to_string(), error.to_string());
    }
    assert_eq!(error.reason(), "AssignmentTooLarge");
    let EncodeError::TooLarge {
        shards,
        pods,
        encoded_bytes,
        limit,
        ..
    } = &error
    else {
        panic!("{error}")
    };
    assert_eq!((*shards, *pods, *limit), (60_000, 2_000, MAX_ENCODED_BYTES));
    assert!(*encoded_bytes > MAX_ENCODED_BYTES);
    let message = error.to_string();
    assert!(
        message.contains("too large for a ConfigMap") && message.contains("60000 shards"),
        "{message}"
    );
}

/// The gzip bytes of `encoded`.
fn gzip_of(encoded: &shardring_crds::assignment::encoding::EncodedDocument) -> &[u8] {
    &encoded.binary_data[CONFIGMAP_GZIP_KEY].0
}

/// The JSON a plain single-member gzip reader gets, checking that nothing
/// follows the member.
fn single_member(gzip: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut decoder = flate2::bufread::GzDecoder::new(gzip);
    let mut json = Vec::new();
    decoder.read_to_end(&mut json).unwrap();
    assert!(decoder.into_inner().is_empty(), "bytes after the member");
    json
}

/// Runs `program` with `gzip` on its standard input: its standard output,
/// or `None` when it is not installed.
fn piped(program: &str, args: &[&str], gzip: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take().unwrap();
    let input = gzip.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?} refused the gzip"
    );
    Some(output.stdout)
}

#[test]
fn the_gzip_is_one_member_holding_exactly_the_serde_json() {
    let document = kinesis_document(20_000, 5_000, 0);
    let encoded = encode(&document).unwrap();
    let json = serde_json::to_vec(&document).unwrap();
    assert_eq!(encoded.json_bytes, json.len());
    assert_eq!(single_member(gzip_of(&encoded)), json);
    // gzip(1) and Python's gzip module, when the machine has them.
    if let Some(out) = piped("gzip", &["-dc"], gzip_of(&encoded)) {
        assert_eq!(out, json);
    }
    let python =
        "import gzip,sys; sys.stdout.buffer.write(gzip.decompress(sys.stdin.buffer.read()))";
    if let Some(out) = piped("python3", &["-c", python], gzip_of(&encoded)) {
        assert_eq!(out, json);
    }
}

#[test]
fn a_warm_cache_encodes_a_run_of_joins_exactly_as_no_cache() {
    // Pods joining one after another, each taking a few shards (and a
    // standby) from others, the epoch bumped each time; the cache also
    // sees a document of another group in between.
    let mut document = kinesis_document(20_000, 5_000, 0);
    let other = kinesis_document(6_000, 600, 1);
    let mut cache = EncodeCache::default();
    let mut rng = Rng::new(3);
    encode_with(&document, &mut cache).unwrap();
    for join in 0..4 {
        let pod = format!("joined-{join}");
        for _ in 0..4 {
            let id = format!("shardId-{:012}", rng.next() % 20_000);
            let record = document.shards.get_mut(&id).unwrap();
            record.owner = Some(pod.clone());
            record.standbys = vec![format!("joined-{}", (join + 1) % 4)];
        }
        document.epoch += 1;
        document.reindex_pods();
        let cold = encode(&document).unwrap();
        let warm = encode_with(&document, &mut cache).unwrap();
        assert_eq!(warm, cold, "join {join}");
        assert_eq!(
            single_member(gzip_of(&warm)),
            serde_json::to_vec(&document).unwrap()
        );
        if join == 1 {
            assert_eq!(
                encode_with(&other, &mut cache).unwrap(),
                encode(&other).unwrap()
            );
        }
    }
}

#[test]
fn every_cache_gives_the_same_bytes_and_every_decoder_the_same_json() {
    // Empty; filled by another group's document; filled by the previous
    // version of this one (a pod's shards moved to a new pod, the epoch
    // bumped); with and without the ranges (20,000 shards with a standby
    // fit only without them).
    for standbys in [0, 1] {
        let before = kinesis_document(20_000, 5_000, standbys);
        let mut after = before.clone();
        let moved = after.shards.values_mut().filter(|record| {
            record.owner.as_deref() == before.shards["shardId-000000000007"].owner.as_deref()
        });
        for record in moved {
            record.owner = Some("consumer-new".to_owned());
        }
        after.epoch += 1;
        after.reindex_pods();

        let cold = encode(&after).unwrap();
        assert_eq!(cold.encoding, Encoding::Gzip);
        assert_eq!(cold.hash_key_ranges_omitted, standbys > 0);
        let mut empty = EncodeCache::default();
        let mut unrelated = EncodeCache::default();
        encode_with(&kinesis_document(8_000, 700, 2), &mut unrelated).unwrap();
        let mut previous = EncodeCache::default();
        encode_with(&before, &mut previous).unwrap();
        for (name, cache) in [
            ("empty", &mut empty),
            ("unrelated", &mut unrelated),
            ("previous", &mut previous),
        ] {
            assert_eq!(encode_with(&after, cache).unwrap(), cold, "{name} cache");
        }

        let mut expected = after.clone();
        if standbys > 0 {
            expected
                .shards
                .values_mut()
                .for_each(|record| record.hash_key_range = None);
        }
        let json = serde_json::to_vec(&expected).unwrap();
        assert_eq!(decode(None, Some(&cold.binary_data)).unwrap(), expected);
        assert_eq!(single_member(gzip_of(&cold)), json);
        // A one-shot read of the whole value, as consumers do it.
        let mut one_shot = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(gzip_of(&cold)),
            &mut one_shot,
        )
        .unwrap();
        assert_eq!(one_shot, json);
    }
}

/// `json` gzip-compressed in one stream at `level`, as documents were
/// stored before chunks.
fn one_stream(json: &[u8], level: u32) -> Vec<u8> {
    use std::io::Write as _;
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    gzip.write_all(json).unwrap();
    gzip.finish().unwrap()
}

#[test]
fn chunks_cost_a_few_percent_over_one_gzip_stream() {
    // Level 2, the level these documents are stored at. Without the
    // ranges a chunk of 128 records is shorter JSON, so the dictionary each
    // chunk starts without costs relatively more.
    for (shards, pods, standbys, bound) in [
        (5_000, 1_000, 0, 1.03),
        (20_000, 5_000, 0, 1.03),
        (20_000, 5_000, 1, 1.07),
    ] {
        let mut document = kinesis_document(shards, pods, standbys);
        let encoded = encode(&document).unwrap();
        assert_eq!(encoded.hash_key_ranges_omitted, standbys > 0);
        if encoded.hash_key_ranges_omitted {
            document
                .shards
                .values_mut()
                .for_each(|record| record.hash_key_range = None);
        }
        let chunked = gzip_of(&encoded).len();
        let whole = one_stream(&serde_json::to_vec(&document).unwrap(), 2).len();
        let ratio = chunked as f64 / whole as f64;
        eprintln!(
            "{shards} shards, {standbys} standbys: chunked {chunked} B, one stream {whole} B, {ratio:.4}x"
        );
        assert!(ratio < bound, "{shards} shards: {ratio:.4}x one stream");
    }
}

#[test]
fn the_cache_holds_the_gzip_and_no_json() {
    // At 20,000 shards the JSON is 4.5 MB and its gzip 0.86 MB: the cache
    // holds each chunk's deflate bytes once (the gzip less its header and
    // trailer) and an entry per chunk, cold or warm.
    let mut document = kinesis_document(20_000, 5_000, 0);
    let mut cache = EncodeCache::default();
    for round in 0..2 {
        let encoded = encode_with(&document, &mut cache).unwrap();
        let gzip = gzip_of(&encoded).len();
        let held = cache.bytes();
        eprintln!(
            "round {round}: {held} bytes held, {gzip} of gzip, {} of JSON, {} chunks",
            encoded.json_bytes,
            cache.chunks()
        );
        assert!(held >= gzip - 20, "{held} bytes held, {gzip} of gzip");
        assert!(
            held <= gzip + 64 * 1024,
            "{held} bytes held, {gzip} of gzip"
        );
        document.epoch += 1;
    }
}
