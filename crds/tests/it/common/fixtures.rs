//! Realistic assignment documents for size and golden tests: Kinesis-style
//! shard ids (`shardId-000000000123`), Deployment-style pod names
//! (`consumer-7d9f8b6c5d-x2k4q`) and hash key ranges from an even split of the
//! 128-bit key space.

use std::collections::BTreeMap;

use shardring_crds::{AssignmentDocument, HashKeyRange, ShardPhase, ShardRecord};

/// Deterministic pseudo-random numbers (SplitMix64), so fixtures are stable.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `len` random characters of `[a-z0-9]` (Kubernetes' pod-name suffix alphabet).
    pub fn suffix(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..len)
            .map(|_| {
                let at = self.next() % ALPHABET.len() as u64;
                char::from(ALPHABET[usize::try_from(at).expect("below the alphabet's length")])
            })
            .collect()
    }
}

/// `count` pod names of three ReplicaSets, e.g. `consumer-7d9f8b6c5d-x2k4q`.
pub fn pod_names(count: usize, rng: &mut Rng) -> Vec<String> {
    let replica_sets: Vec<String> = (0..3).map(|_| rng.suffix(10)).collect();
    (0..count)
        .map(|i| format!("consumer-{}-{}", replica_sets[i % 3], rng.suffix(5)))
        .collect()
}

/// Hash key range of shard `index` of `count` in an even split of 0..=2^128-1.
pub fn even_range(index: usize, count: usize) -> HashKeyRange {
    let step = u128::MAX / count as u128;
    let start = step * index as u128;
    let end = if index + 1 == count {
        u128::MAX
    } else {
        start + step - 1
    };
    HashKeyRange {
        start: start.to_string(),
        end: end.to_string(),
    }
}

/// A steady-state document: `shards` Active Kinesis shards spread evenly and
/// randomly over `pods` pods, each with `standbys` standbys.
pub fn kinesis_document(shards: usize, pods: usize, standbys: usize) -> AssignmentDocument {
    let mut rng = Rng::new(42);
    let names = pod_names(pods, &mut rng);
    // A random permutation of the shard slots keeps the load balanced while
    // scattering each pod's shards over the id space, as a hash ring does.
    let mut slots: Vec<usize> = (0..shards).collect();
    for i in (1..slots.len()).rev() {
        slots.swap(
            i,
            usize::try_from(rng.next() % (i as u64 + 1)).expect("below i + 1"),
        );
    }
    let records: BTreeMap<String, ShardRecord> = (0..shards)
        .map(|i| {
            let owner = slots[i] % pods;
            let record = ShardRecord {
                owner: Some(names[owner].clone()),
                state: ShardPhase::Active,
                standbys: (1..=standbys)
                    .map(|k| names[(owner + k) % pods].clone())
                    .collect(),
                parents: Vec::new(),
                hash_key_range: Some(Box::new(even_range(i, shards))),
                handoff: None,
                checkpoint: None,
                return_hold: None,
            };
            (format!("shardId-{i:012}"), record)
        })
        .collect();
    AssignmentDocument::from_shards("prod/api-logs", 1234, records, names)
}
