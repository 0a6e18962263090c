//! The hashes the engine is built on, fixed forever because assignments must
//! be identical on every machine and every release (pinned by golden vectors
//! in `tests/it/golden.rs`).
//!
//! * shard position: `xxh3_64(consumerName ‖ 0x00 ‖ shardId)` (XXH3, 64-bit,
//!   seed 0, over the UTF-8 bytes);
//! * pod position (for tie-breaks): `xxh3_64(consumerName ‖ 0x00 ‖ podName)`;
//! * virtual node `i` of a pod on the ring: `xxh3_64(podName ‖ 0x00 ‖ i)`
//!   with `i` in decimal, `i` in `0..VIRTUAL_NODES`;
//! * which of an over-full pod's shards it keeps: the lowest
//!   `mix(shardPosition ^ podPosition)` (a rendezvous score).

use xxhash_rust::xxh3::xxh3_64;

/// Virtual nodes per pod on the ring. The ring only orders candidates (quotas
/// enforce the balance), so a modest count keeps ring construction cheap.
pub const VIRTUAL_NODES: u32 = 16;

/// Hashes `a ‖ 0x00 ‖ b` using `buf` as scratch space (no allocation once warm).
pub fn hash_pair(buf: &mut Vec<u8>, a: &[u8], b: &[u8]) -> u64 {
    buf.clear();
    buf.extend_from_slice(a);
    buf.push(0);
    buf.extend_from_slice(b);
    xxh3_64(buf)
}

/// Position of a shard on the ring.
pub fn shard_hash(consumer_name: &str, shard_id: &str) -> u64 {
    hash_pair(
        &mut Vec::new(),
        consumer_name.as_bytes(),
        shard_id.as_bytes(),
    )
}

/// Position of a pod for deterministic tie-breaks.
pub fn pod_hash(consumer_name: &str, pod_name: &str) -> u64 {
    hash_pair(
        &mut Vec::new(),
        consumer_name.as_bytes(),
        pod_name.as_bytes(),
    )
}

/// Position of virtual node `i` of a pod.
pub fn vnode_hash(buf: &mut Vec<u8>, pod_name: &str, i: u32) -> u64 {
    let mut digits = [0u8; 10];
    hash_pair(buf, pod_name.as_bytes(), decimal(i, &mut digits))
}

/// A strong 64-bit finaliser (the SplitMix64 / Stafford variant 13 mixer).
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn decimal(mut n: u32, out: &mut [u8; 10]) -> &[u8] {
    let mut at = out.len();
    loop {
        at -= 1;
        out[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &out[at..];
        }
    }
}

/// Parses a decimal u128 (no sign, no whitespace, at least one digit).
pub fn parse_u128(text: &str) -> Result<u128, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a decimal number"));
    }
    text.parse::<u128>()
        .map_err(|_| format!("{text:?} is larger than 2^128 - 1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits() {
        let mut d = [0u8; 10];
        assert_eq!(decimal(0, &mut d), b"0");
        assert_eq!(decimal(15, &mut d), b"15");
        assert_eq!(decimal(u32::MAX, &mut d), b"4294967295");
    }

    #[test]
    fn parses_u128() {
        assert_eq!(parse_u128("0"), Ok(0));
        assert_eq!(
            parse_u128("340282366920938463463374607431768211455"),
            Ok(u128::MAX)
        );
        assert!(parse_u128("340282366920938463463374607431768211456").is_err());
        assert!(parse_u128("-1").is_err());
        assert!(parse_u128("").is_err());
        assert!(parse_u128(" 1").is_err());
    }
}
