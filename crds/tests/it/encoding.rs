//! Size limits of the published document: a 20,000-shard, 5,000-pod group
//! round-trips through the ConfigMap encoding under the 1 MiB object limit
//! (raw bytes counted, as the API server's ConfigMap validation does), and a group that cannot fit is refused with a clear error
//! instead of being truncated.

use std::collections::BTreeMap;

use shardring_crds::assignment::encoding::{
    EncodeError, Encoding, MAX_ENCODED_BYTES, decode, encode,
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
