//! Prints the size of the published assignment document for realistic groups
//! (Kinesis-style shard ids, Deployment pod names, even-split hash key ranges):
//! compact JSON, gzip of the full document (raw and base64), what `encode`
//! stores (raw bytes counted, keys included, as the API server counts them) and how, and the time to encode and
//! decode.
//!
//!     cargo run --release -p shardring-crds --example document_size

#[path = "../tests/it/common/fixtures.rs"]
mod fixtures;

use std::io::Write as _;
use std::time::Instant;

use shardring_crds::assignment::encoding::{Encoding, MAX_ENCODED_BYTES, decode, encode};

fn main() {
    println!(
        "limit for the stored payload: {MAX_ENCODED_BYTES} bytes (1 MiB - 64 KiB headroom, raw bytes counted)\n"
    );
    println!(
        "{:>7} {:>6} {:>8} {:>10} {:>9} {:>12} {:>10} {:>20} {:>9} {:>9}",
        "shards",
        "pods",
        "standbys",
        "json B",
        "gzip B",
        "gzip b64 B",
        "stored B",
        "stored as",
        "encode ms",
        "decode ms"
    );
    for (shards, pods, standbys) in [
        (1_000, 100, 0),
        (5_000, 1_000, 0),
        (20_000, 1_000, 0),
        (20_000, 5_000, 0),
        (20_000, 5_000, 1),
        (20_000, 5_000, 2),
        (50_000, 5_000, 0),
        (100_000, 5_000, 0),
    ] {
        let document = fixtures::kinesis_document(shards, pods, standbys);
        let json = serde_json::to_vec(&document).expect("serializes");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&json).expect("in memory");
        let gzip = gz.finish().expect("in memory").len();
        let started = Instant::now();
        let result = encode(&document);
        let encode_ms = started.elapsed().as_secs_f64() * 1e3;
        let (stored, how, decode_ms) = match &result {
            Ok(encoded) => {
                let started = Instant::now();
                let decoded =
                    decode(Some(&encoded.data), Some(&encoded.binary_data)).expect("round-trips");
                let decode_ms = format!("{:.1}", started.elapsed().as_secs_f64() * 1e3);
                assert_eq!(decoded.pods, document.pods);
                let how = match (encoded.encoding, encoded.hash_key_ranges_omitted) {
                    (Encoding::Plain, _) => "data (plain)",
                    (Encoding::Gzip, false) => "binaryData (gzip)",
                    (Encoding::Gzip, true) => "gzip, ranges omitted",
                };
                (
                    encoded.encoded_bytes().to_string(),
                    how.to_owned(),
                    decode_ms,
                )
            }
            Err(error) => ("-".to_owned(), error.reason().to_owned(), "-".to_owned()),
        };
        println!(
            "{shards:>7} {pods:>6} {standbys:>8} {:>10} {gzip:>9} {:>12} {stored:>10} {how:>20} {encode_ms:>9.1} {decode_ms:>9}",
            json.len(),
            gzip.div_ceil(3) * 4,
        );
    }
}
