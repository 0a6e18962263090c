//! The pool book: rows of one deal, a pool at rest deals nothing, a lost
//! book deals the same, a pod event deals again from what every group
//! holds, a changed count deals at once, standby slots, pools that share
//! pods, and the throughput turn.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::crds::assignment::{ShardPhase, ShardRecord};
use crate::crds::shard_group::BalanceMode;
use crate::crds::{AssignmentDocument, ConsumerPool};
use crate::engine::ShardLoad;
use crate::fixtures::{now, pod_info, pool};

fn pods(n: usize) -> Vec<PodInfo> {
    (0..n).map(|i| pod_info(&format!("p-{i}"))).collect()
}

/// A document of `group` with shards Active on the pods `holdings` names
/// (`n` shards each), with `standbys` standby slots on the pods it names.
fn document(group: &str, holdings: &BTreeMap<String, u64>) -> Arc<AssignmentDocument> {
    let mut doc = AssignmentDocument::new(group, 1);
    let mut next = 0;
    for (pod, &n) in holdings {
        for _ in 0..n {
            doc.shards.insert(
                format!("s-{next}"),
                ShardRecord {
                    owner: Some(pod.clone()),
                    state: ShardPhase::Active,
                    ..ShardRecord::default()
                },
            );
            next += 1;
        }
    }
    Arc::new(doc)
}

fn peer(group: &str, readable: u64, holdings: Option<&BTreeMap<String, u64>>) -> Peer {
    Peer {
        group: group.to_owned(),
        pool: crate::fixtures::POOL.into(),
        balance: BalanceMode::Count,
        standbys: 0,
        readable,
        document: holdings.map(|h| document(group, h)),
        loads: BTreeMap::new(),
    }
}

fn name(g: usize) -> String {
    format!("ns/g-{g:02}")
}

/// Every group's share of `book`, each group asking with what `held`
/// shows of every group (a group absent from it has no document yet).
fn shares(
    book: &mut PoolBook,
    readable: &[u64],
    pool: &ConsumerPool,
    pods: &[PodInfo],
    held: &BTreeMap<String, BTreeMap<String, u64>>,
) -> BTreeMap<String, Shared> {
    let peers: Vec<Peer> = (0..readable.len())
        .map(|g| peer(&name(g), readable[g], held.get(&name(g))))
        .collect();
    let returning = BTreeMap::new();
    let pools = [PoolPods {
        pool,
        pods,
        returning: &returning,
    }];
    (0..readable.len())
        .map(|g| (name(g), book.share(&name(g), &pools, peers.clone(), now())))
        .collect()
}

/// What each group holds once it applied its row (one shard on each of
/// its ⌈⌉ pods: groups of fewer shards than pods).
fn applied(shares: &BTreeMap<String, Shared>) -> BTreeMap<String, BTreeMap<String, u64>> {
    shares
        .iter()
        .map(|(g, shared)| {
            let ceilings = shared.share.ceilings.clone().unwrap_or_default();
            (g.clone(), ceilings.into_iter().map(|p| (p, 1)).collect())
        })
        .collect()
}

fn per_pod(shares: &BTreeMap<String, Shared>) -> BTreeMap<String, usize> {
    let mut per_pod = BTreeMap::new();
    for shared in shares.values() {
        for pod in shared.share.ceilings.iter().flatten() {
            *per_pod.entry(pod.clone()).or_default() += 1;
        }
    }
    per_pod
}

#[test]
fn a_pool_of_one_group_is_planned_alone() {
    let mut book = PoolBook::default();
    let got = shares(&mut book, &[4], &pool(0), &pods(3), &BTreeMap::new());
    assert_eq!(got[&name(0)], Shared::default());
}

#[test]
fn the_groups_apply_rows_of_one_deal_and_a_pool_at_rest_deals_nothing() {
    let (pool, pods) = (pool(0), pods(8));
    let readable = [2; 20];
    let mut book = PoolBook::default();
    // Nothing published yet: the first group deals, the others take their
    // rows of that deal.
    let first = shares(&mut book, &readable, &pool, &pods, &BTreeMap::new());
    assert_eq!(
        per_pod(&first).values().copied().collect::<Vec<_>>(),
        vec![5; 8]
    );
    assert_eq!(first[&name(0)].changed.len(), 19);
    assert!(first.iter().skip(1).all(|(_, s)| s.changed.is_empty()));
    let balance = first[&name(0)].share.balance.clone().expect("pooled");
    assert_eq!(
        (balance.pools, balance.groups),
        (vec![crate::fixtures::POOL.to_owned()], 20)
    );

    // As the groups apply their rows the inputs of the deal stay the same:
    // nobody deals again, whatever the others hold meanwhile.
    let half: BTreeMap<_, _> = applied(&first).into_iter().take(10).collect();
    let again = shares(&mut book, &readable, &pool, &pods, &half);
    for (g, shared) in &again {
        assert_eq!(shared.share.ceilings, first[g].share.ceilings, "{g}");
        assert!(shared.changed.is_empty(), "{g}");
    }

    // A book lost (a restart) is dealt again from the documents at rest,
    // and deals the same rows.
    let mut restarted = PoolBook::default();
    let rebuilt = shares(&mut restarted, &readable, &pool, &pods, &applied(&first));
    for (g, shared) in &rebuilt {
        assert_eq!(shared.share.ceilings, first[g].share.ceilings, "{g}");
    }
}

#[test]
fn a_pod_event_deals_again_from_what_every_group_holds() {
    let pool = pool(0);
    let readable = [2; 20];
    let mut book = PoolBook::default();
    let before = shares(&mut book, &readable, &pool, &pods(8), &BTreeMap::new());
    let after = shares(&mut book, &readable, &pool, &pods(9), &applied(&before));
    let moved: usize = after
        .iter()
        .map(|(g, s)| {
            let was = before[g].share.ceilings.clone().unwrap_or_default();
            s.share
                .ceilings
                .iter()
                .flatten()
                .filter(|p| !was.contains(p))
                .count()
        })
        .sum();
    // The new pod takes its ⌊40/9⌋ = 4 and nothing else moves.
    assert_eq!(moved, 4);
    assert_eq!(per_pod(&after)["p-8"], 4);
}

#[test]
fn a_group_on_a_pod_that_left_is_woken_even_when_its_row_stays_the_same() {
    // 56 shards on 8 pods or on 7 have no ⌈⌉ pod: every row is empty
    // before and after the pod leaves, yet each group must move the 7
    // shards it had there.
    let pool = pool(0);
    let readable = [56, 56];
    let held: BTreeMap<String, BTreeMap<String, u64>> = (0..2)
        .map(|g| (name(g), (0..8).map(|p| (format!("p-{p}"), 7)).collect()))
        .collect();
    let mut book = PoolBook::default();
    shares(&mut book, &readable, &pool, &pods(8), &held);
    let before = shares(&mut book, &readable, &pool, &pods(8), &held);
    assert!(before.values().all(|s| s.changed.is_empty()));
    let after = shares(&mut book, &readable, &pool, &pods(7), &held);
    assert_eq!(
        after[&name(0)].share.ceilings,
        before[&name(0)].share.ceilings
    );
    assert_eq!(after[&name(0)].changed, vec![name(1)]);
    // The deal is not made again for the next group: nobody else is woken
    // (the group woken holds there until its own plan moves them).
    assert!(after[&name(1)].changed.is_empty());
}

#[test]
fn a_group_whose_count_changed_deals_at_once_and_its_peers_with_the_same_count() {
    let (pool, pods) = (pool(0), pods(8));
    let mut book = PoolBook::default();
    let first = shares(&mut book, &[2; 20], &pool, &pods, &BTreeMap::new());
    let held = applied(&first);
    // g-00 now has 4 partitions (its source says so); its document still 2:
    // it asks first, with its new count; its peers with the document's.
    let mut readable = [2; 20];
    readable[0] = 4;
    let peers = |own: usize| -> Vec<Peer> {
        (0..20)
            .map(|g| {
                let count = if g == own { readable[g] } else { 2 };
                peer(&name(g), count, held.get(&name(g)))
            })
            .collect()
    };
    let returning = BTreeMap::new();
    let pools = [PoolPods {
        pool: &pool,
        pods: &pods,
        returning: &returning,
    }];
    let grown = book.share(&name(0), &pools, peers(0), now());
    assert_eq!(grown.share.ceilings.as_ref().map(Vec::len), Some(4));
    // Its two new extras fit beside the others' (42 over 8: at most 6 a
    // pod), so the new deal keeps every other row as it was.
    assert!(grown.changed.is_empty(), "{:?}", grown.changed);
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for g in 0..20 {
        let shared = book.share(&name(g), &pools, peers(g), now());
        assert!(
            shared.changed.is_empty(),
            "{g}: the book knows g-00's count"
        );
        for pod in shared.share.ceilings.into_iter().flatten() {
            *per_pod.entry(pod).or_default() += 1;
        }
    }
    // 42 extras over 8 pods: 5 or 6 each.
    assert!(per_pod.values().all(|&n| n == 5 || n == 6), "{per_pod:?}");
}

#[test]
fn standby_slots_are_dealt_over_the_groups_with_standbys() {
    let (pool, pods) = (pool(0), pods(8));
    let returning = BTreeMap::new();
    let pools = [PoolPods {
        pool: &pool,
        pods: &pods,
        returning: &returning,
    }];
    // 20 groups of 2 shards, one standby each, and one without standbys.
    let peers: Vec<Peer> = (0..21)
        .map(|g| Peer {
            standbys: u32::from(g < 20),
            ..peer(&name(g), 2, None)
        })
        .collect();
    let mut book = PoolBook::default();
    let mut slots: BTreeMap<String, usize> = BTreeMap::new();
    for g in 0..21 {
        let shared = book.share(&name(g), &pools, peers.clone(), now());
        let balance = shared.share.balance.expect("pooled");
        if g < 20 {
            assert_eq!(balance.standby_groups, 20);
            let row = shared.share.standby_ceilings.expect("a standby row");
            assert_eq!(row.len(), 2);
            for pod in row {
                *slots.entry(pod).or_default() += 1;
            }
        } else {
            assert_eq!(
                (balance.standby_groups, shared.share.standby_ceilings),
                (0, None)
            );
        }
    }
    assert_eq!(slots.values().copied().collect::<Vec<_>>(), vec![5; 8]);
}

#[test]
fn pools_that_share_pods_deal_each_group_on_its_own_pods() {
    let all = pods(6);
    let mut a = pool(0);
    a.metadata.name = Some("a".into());
    let mut b = pool(0);
    b.metadata.name = Some("b".into());
    let returning = BTreeMap::new();
    let pools = [
        PoolPods {
            pool: &a,
            pods: &all[..4],
            returning: &returning,
        },
        PoolPods {
            pool: &b,
            pods: &all[2..],
            returning: &returning,
        },
    ];
    let peers: Vec<Peer> = (0..10)
        .map(|g| Peer {
            pool: if g % 2 == 0 { "a" } else { "b" }.into(),
            ..peer(&name(g), 3, None)
        })
        .collect();
    let mut book = PoolBook::default();
    let mut extras: BTreeMap<String, usize> = BTreeMap::new();
    for (g, p) in peers.iter().enumerate() {
        let shared = book.share(&p.group, &pools, peers.clone(), now());
        let balance = shared.share.balance.expect("pooled");
        assert_eq!(balance.pools, ["a", "b"]);
        let own: Vec<String> = if g % 2 == 0 { &all[..4] } else { &all[2..] }
            .iter()
            .map(|p| p.name.clone())
            .collect();
        for pod in shared.share.ceilings.expect("a row") {
            assert!(own.contains(&pod), "{}: {pod} is not its pool's", p.group);
            *extras.entry(pod).or_default() += 1;
        }
    }
    // 3 shards on 4 pods: 3 extras per group, 30 in all; p-2 and p-3 are
    // in both pools: their share of the extras is 3/4 of every group's.
    assert_eq!(extras.values().sum::<usize>(), 30);
    for (pod, n) in &extras {
        let share = if pod == "p-2" || pod == "p-3" {
            7.5
        } else {
            3.75
        };
        assert!((*n as f64 - share).abs() < 1.0, "{pod}: {n} vs {share}");
    }
}

#[test]
fn throughput_groups_see_the_others_load_and_decide_one_at_a_time() {
    let (pool, pods) = (pool(0), pods(2));
    let returning = BTreeMap::new();
    let pools = [PoolPods {
        pool: &pool,
        pods: &pods,
        returning: &returning,
    }];
    let load = |rate| ShardLoad {
        rate,
        noise: 0,
        shift: 0,
    };
    let throughput = |g: usize, on: &str, rate: u64| {
        let held = BTreeMap::from([(on.to_owned(), 1)]);
        Peer {
            balance: BalanceMode::Throughput,
            loads: BTreeMap::from([("s-0".to_owned(), load(rate))]),
            ..peer(&name(g), 1, Some(&held))
        }
    };
    let peers = vec![throughput(0, "p-0", 100), throughput(1, "p-0", 300)];
    let mut book = PoolBook::default();
    let first = book.share(&name(0), &pools, peers.clone(), now());
    assert_eq!(first.share.load["p-0"].rate, 300);
    assert_eq!(first.share.turn_taken_by, None);
    assert_eq!(first.share.balance.expect("pooled").groups, 2);
    // g-01 asks while g-00's reconcile runs: it waits, and is woken when
    // g-00 is done.
    let second = book.share(&name(1), &pools, peers.clone(), now());
    assert_eq!(second.share.turn_taken_by, Some(name(0)));
    assert_eq!(second.share.load["p-0"].rate, 100);
    assert_eq!(book.done(&name(0), false), [name(1)]);
    let again = book.share(&name(1), &pools, peers, now());
    assert_eq!(again.share.turn_taken_by, None);
    // A group that moved shards wakes its throughput peers.
    assert_eq!(book.done(&name(1), true), [name(0)]);
    // A group with nothing measured is balanced alone by count.
    let unmeasured = vec![
        Peer {
            loads: BTreeMap::new(),
            ..throughput(0, "p-0", 0)
        },
        throughput(1, "p-1", 300),
    ];
    let alone = book.share(&name(0), &pools, unmeasured, now());
    assert!(alone.share.load.is_empty());
    assert_eq!(alone.share.turn_taken_by, None);
}

/// A document of `group` with shards owned as `owners` says, each with
/// every other pod of `pods` as its standby (as a group whose standbys
/// take every pod but a shard's owner has them).
fn every_other_pod_stands_by(
    group: &str,
    owners: &BTreeMap<String, u64>,
    pods: &[PodInfo],
) -> Arc<AssignmentDocument> {
    let mut doc = (*document(group, owners)).clone();
    for record in doc.shards.values_mut() {
        record.standbys = pods
            .iter()
            .map(|p| p.name.clone())
            .filter(|p| Some(p) != record.owner.as_ref())
            .collect();
    }
    Arc::new(doc)
}

/// A group whose standbys take every pod but a shard's owner (two on
/// three pods) has its slots where its owners are not, whatever its row
/// of the deal; when its owners move, the slots of the other groups are
/// dealt again around where its slots are now (and they are woken to ask),
/// so every pod's slots over the pool stay within one (found by the
/// simulation's pool seeds: the deal was not made again, and a new
/// leader's was; then, it was only when a group with standbys next asked,
/// minutes later).
#[test]
fn slots_a_groups_owners_place_are_dealt_around_when_its_owners_move() {
    let (pool, pods) = (pool(0), pods(3));
    let returning = BTreeMap::new();
    let pools = [PoolPods {
        pool: &pool,
        pods: &pods,
        returning: &returning,
    }];
    let held = |counts: [u64; 3]| -> BTreeMap<String, u64> {
        (0..3).map(|i| (format!("p-{i}"), counts[i])).collect()
    };
    // g-00: 7 shards with 2 standbys each (14 slots: 4 or 5 per pod, where
    // its owners are not); g-01: 4 shards with 1 standby (1 or 2 per pod).
    let peers = |owners: [u64; 3]| {
        vec![
            Peer {
                standbys: 2,
                document: Some(every_other_pod_stands_by(&name(0), &held(owners), &pods)),
                ..peer(&name(0), 7, None)
            },
            Peer {
                standbys: 1,
                ..peer(&name(1), 4, Some(&held([2, 1, 1])))
            },
        ]
    };
    let mut book = PoolBook::default();
    let row = |book: &mut PoolBook, owners| {
        let shared = book.share(&name(1), &pools, peers(owners), now());
        shared.share.standby_ceilings.expect("a standby row")
    };
    // g-00's slots: 4, 5, 5: g-01's extra slot goes to p-0.
    assert_eq!(row(&mut book, [3, 2, 2]), ["p-0"]);
    // Its owners move: 5, 4, 5; g-01's extra slot follows to p-1.
    assert_eq!(row(&mut book, [2, 3, 2]), ["p-1"]);
    // A new leader's book deals the same, although g-01's document still
    // has its extra slot on p-0, where g-00's slots leave no room: g-00's
    // slots are not the deal's to move.
    let mut lost = PoolBook::default();
    let mut moved = peers([2, 3, 2]);
    let mut standbys = (*moved[1].document.clone().expect("a document")).clone();
    for (i, record) in standbys.shards.values_mut().enumerate() {
        // Shards 0 and 1 are p-0's, 2 and 3 p-1's and p-2's.
        record.standbys = vec![["p-1", "p-2", "p-0", "p-0"][i].to_owned()];
    }
    moved[1].document = Some(Arc::new(standbys));
    let shared = lost.share(&name(1), &pools, moved, now());
    assert_eq!(shared.share.standby_ceilings, Some(vec!["p-1".to_owned()]));
    // When g-00's reconcile moves its owners, its slots move with them:
    // g-01 is woken to be dealt its row around them (it may reconcile
    // next only minutes later).
    lost.share(&name(0), &pools, peers([3, 2, 2]), now());
    assert_eq!(lost.done(&name(0), true), [name(1)]);
    assert!(lost.done(&name(1), true).is_empty());
}

/// A shard held for its returning owner is one of its group's readable
/// shards (its plan counts it): the deal counts it too, or the group's row
/// is one ⌈⌉ short once the shard is active again, and stays so until the
/// group's next reconcile deals with its new count (found by the
/// simulation's pool seeds: a static group's next was 300 s away).
#[test]
fn shards_held_for_a_returning_pod_are_dealt() {
    let (pool, pods) = (pool(0), pods(6));
    let returning = BTreeMap::new();
    let pools = [PoolPods {
        pool: &pool,
        pods: &pods,
        returning: &returning,
    }];
    let mut held = (*document(&name(0), &BTreeMap::from([("p-0".into(), 2)]))).clone();
    held.shards.insert(
        "s-held".into(),
        ShardRecord {
            owner: Some("p-5".into()),
            state: ShardPhase::Held,
            ..ShardRecord::default()
        },
    );
    assert_eq!(readable_in(&held), 3);
    let peers = vec![
        Peer {
            document: Some(Arc::new(held.clone())),
            ..peer(&name(0), readable_in(&held), None)
        },
        peer(&name(1), 4, None),
    ];
    let mut book = PoolBook::default();
    let shared = book.share(&name(0), &pools, peers, now());
    assert_eq!(shared.share.ceilings.expect("a row").len(), 3);
}

#[test]
fn a_change_only_a_group_of_another_mode_sees_deals_again_and_wakes_the_others() {
    // A pod leaves the deal's inputs, and the first to ask after it is a
    // throughput group (as when a returning pod's hold ends in its own
    // document): it gets no row, but the count groups whose rows the new
    // deal changes are woken.
    let pool = pool(0);
    let returning = BTreeMap::new();
    let (three, two) = (pods(3), pods(2));
    let pools = |pods| {
        [PoolPods {
            pool: &pool,
            pods,
            returning: &returning,
        }]
    };
    let throughput = Peer {
        balance: BalanceMode::Throughput,
        ..peer(&name(2), 1, None)
    };
    let peers = vec![peer(&name(0), 2, None), peer(&name(1), 2, None), throughput];
    let mut book = PoolBook::default();
    for g in 0..3 {
        book.share(&name(g), &pools(&three), peers.clone(), now());
    }
    let row = |shared: &Shared| shared.share.ceilings.clone();
    let before = book.share(&name(0), &pools(&three), peers.clone(), now());
    assert!(before.changed.is_empty());
    let seen = book.share(&name(2), &pools(&two), peers.clone(), now());
    assert_eq!(row(&seen), None);
    assert_eq!(seen.changed, vec![name(0), name(1)]);
    // The count groups take the new rows without dealing again.
    let after = book.share(&name(0), &pools(&two), peers, now());
    assert!(after.changed.is_empty());
    assert_ne!(row(&after), row(&before));
}
