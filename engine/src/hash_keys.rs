//! ExplicitHashKey values that spread producers evenly over a stream's shards
//! and keep spreading evenly as shards split (`shardring-dev hash-keys`).
//!
//! The key space `[0, 2^128)` is a binary tree of intervals: a key sits at the
//! midpoint of its interval and splits it into a left half `[lo, mid)` and a
//! right half `[mid, last]`. Each new key halves the largest free interval;
//! among equally large intervals the one whose start has the smallest
//! bit-reversed value goes first, which fills left and right subtrees
//! alternately, so no subtree is ever more than one key heavier than its
//! sibling (keys 1 to 7 land at 1/2, 1/4, 3/4, 1/8, 5/8, 3/8, 7/8).
//!
//! With existing keys, the tree is rebuilt from them first: each existing key
//! starts an interval that runs to the next key, and the largest (emptiest) of
//! those gaps are filled first. Feeding a previous run's output back in as
//! `existing` continues exactly where it left off.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use thiserror::Error;

/// An unreadable list of existing keys.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HashKeysError {
    /// A line is not a decimal 128-bit number.
    #[error("line {line}: {reason}")]
    BadKey {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Parses existing keys: one decimal number per line; blank lines and text
/// after `#` are ignored.
pub fn parse_keys(text: &str) -> Result<Vec<u128>, HashKeysError> {
    let mut keys = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let body = line.split('#').next().unwrap_or("").trim();
        if body.is_empty() {
            continue;
        }
        let key = crate::hash::parse_u128(body).map_err(|reason| HashKeysError::BadKey {
            line: at + 1,
            reason,
        })?;
        keys.push(key);
    }
    Ok(keys)
}

/// Interval `[lo, last]` (inclusive), whose first point is taken (a key or the
/// space's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Gap {
    /// Free points after `lo` (`last - lo`): larger first.
    free: u128,
    /// Tie-break: smallest bit-reversed start first.
    order: Reverse<u128>,
    lo: u128,
    last: u128,
}

impl Gap {
    fn new(lo: u128, last: u128) -> Self {
        Gap {
            free: last - lo,
            order: Reverse(lo.reverse_bits()),
            lo,
            last,
        }
    }
}

/// Returns `count` new keys (in the order they should be handed out) given
/// the keys already in use. Stops early only if the key space runs out.
pub fn hash_keys(count: usize, existing: &[u128]) -> Vec<u128> {
    let mut used = existing.to_vec();
    used.sort_unstable();
    used.dedup();
    let mut heap = BinaryHeap::with_capacity(used.len() + count + 1);
    if used.is_empty() {
        // The empty space behaves as one interval whose first point is free:
        // its first key lands on the midpoint 2^127.
        let mut out = Vec::with_capacity(count);
        if count > 0 {
            out.push(1u128 << 127);
            heap.push(Gap::new(0, (1u128 << 127) - 1));
            heap.push(Gap::new(1u128 << 127, u128::MAX));
        }
        fill(&mut heap, count, &mut out);
        return out;
    }
    if used[0] > 0 {
        heap.push(Gap::new(0, used[0] - 1));
    }
    for (i, &key) in used.iter().enumerate() {
        let last = used.get(i + 1).map_or(u128::MAX, |next| next - 1);
        heap.push(Gap::new(key, last));
    }
    let mut out = Vec::with_capacity(count);
    fill(&mut heap, count, &mut out);
    out
}

fn fill(heap: &mut BinaryHeap<Gap>, count: usize, out: &mut Vec<u128>) {
    while out.len() < count {
        let Some(gap) = heap.pop() else { return };
        if gap.free == 0 {
            return;
        }
        let d = gap.last - gap.lo;
        let mid = gap.lo + d / 2 + d % 2;
        out.push(mid);
        heap.push(Gap::new(gap.lo, mid - 1));
        heap.push(Gap::new(mid, gap.last));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: u128 = 1 << 127;

    #[test]
    fn first_keys_fill_the_tree_breadth_first_alternating() {
        let keys = hash_keys(7, &[]);
        let eighth = 1u128 << 125;
        assert_eq!(
            keys,
            vec![
                HALF,
                HALF / 2,
                HALF + HALF / 2,
                eighth,
                5 * eighth,
                3 * eighth,
                7 * eighth
            ]
        );
    }

    #[test]
    fn subtrees_differ_by_at_most_one() {
        for n in 1..200 {
            let keys = hash_keys(n, &[]);
            // Root split, then the split of each half.
            for (lo, hi) in [(0u128, u128::MAX), (0, HALF - 1), (HALF, u128::MAX)] {
                let mid = lo + (hi - lo) / 2 + 1;
                let left = keys.iter().filter(|&&k| k > lo && k < mid).count();
                let right = keys.iter().filter(|&&k| k > mid && k <= hi).count();
                assert!(
                    left.abs_diff(right) <= 1,
                    "n={n} lo={lo}: {left} vs {right}"
                );
            }
        }
    }

    #[test]
    fn continuing_from_existing_keys_matches_one_run() {
        let all = hash_keys(40, &[]);
        let first = hash_keys(13, &[]);
        let rest = hash_keys(27, &first);
        assert_eq!([first, rest].concat(), all);
    }

    #[test]
    fn backfills_the_emptiest_gap_first() {
        // Keys crowded into the low half: the next key goes to the high half.
        let existing = [HALF / 4, HALF / 2, HALF - HALF / 4];
        let next = hash_keys(1, &existing);
        assert!(next[0] > HALF, "{next:?}");
    }

    #[test]
    fn parses_with_line_numbers() {
        assert_eq!(parse_keys("1\n\n# note\n2 # two\n"), Ok(vec![1, 2]));
        assert_eq!(
            parse_keys("1\nx\n"),
            Err(HashKeysError::BadKey {
                line: 2,
                reason: "\"x\" is not a decimal number".into()
            })
        );
    }
}
