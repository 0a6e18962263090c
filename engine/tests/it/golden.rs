//! Golden vectors: the hashes and a few complete plans, pinned. If one of
//! these changes, assignments change on upgrade; that is a breaking change
//! and must not happen by accident. The hash values were cross-checked
//! against the reference XXH3 implementation (python-xxhash
//! `xxh3_64_intdigest`).

use shardring_engine::hash::{VIRTUAL_NODES, mix, pod_hash, shard_hash, vnode_hash};
use shardring_engine::{Balance, Rebalance};

use crate::common::*;

#[test]
fn hash_vectors() {
    assert_eq!(
        shard_hash("orders", "shardId-000000000000"),
        0xdffd3ff5b4731f12
    );
    assert_eq!(shard_hash("", ""), 0xc44bdff4074eecdb);
    assert_eq!(shard_hash("billing", "orders-17"), 0x543e36e9f871d7af);
    assert_eq!(pod_hash("orders", "consumer-0"), 0x83cec1fcb32533b0);
    assert_eq!(
        vnode_hash(&mut Vec::new(), "consumer-0", 0),
        0x97cf82f729445d41
    );
    assert_eq!(
        vnode_hash(&mut Vec::new(), "consumer-0", 15),
        0xfb974bdf693d8e5b
    );
    assert_eq!(mix(0), 0);
    assert_eq!(mix(1), 0x5692161d100b05e5);
    assert_eq!(VIRTUAL_NODES, 16);
}

/// Owners in shard-id order, as pod numbers.
fn owners(out: &shardring_engine::PlanOutput) -> String {
    out.assignment
        .values()
        .map(|a| {
            a.owner
                .as_deref()
                .map_or("-", |o| o.trim_start_matches("consumer-"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn plan_vectors() {
    let fresh = run(&input(shards(20), pods(6)));
    assert_eq!(owners(&fresh), "2 3 2 0 1 4 0 5 1 5 0 4 3 2 5 3 4 4 5 1");

    // A rolling-deploy step: consumer-2 terminating, consumer-6 new.
    let mut inp = input(shards(20), pods(6));
    inp.previous = previous_of(&fresh);
    inp.pods.push(pod("consumer-6"));
    inp.pods[2].terminating = true;
    let next = run(&with_rebalance(inp, Rebalance::RequiredOnly));
    assert_eq!(owners(&next), "6 3 6 0 1 4 0 5 1 5 0 4 3 6 5 3 4 4 5 1");

    let ranged = run(&with_balance(
        input(ranged_shards(12), pods(5)),
        Balance::HashRange,
    ));
    assert_eq!(owners(&ranged), "0 3 1 0 2 4 0 3 2 4 1 1");
}
