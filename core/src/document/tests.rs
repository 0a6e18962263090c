//! The next document built from kept and rebuilt records decides exactly
//! as the straightforward construction (every record rebuilt, the whole
//! document built and compared): the same document, borrowed from the
//! published one exactly when that one is.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{
    NextRecord, NextRecords, PublishedCopy, add_lineage, indexes_its_shards, next_document,
};
use crate::crds::{AssignmentDocument, Handoff, ShardPhase, ShardRecord};

/// The next document as it was decided before records could be kept:
/// every record rebuilt, the whole document built and compared.
fn rebuilt<'a>(
    shard_group: String,
    shards: BTreeMap<String, ShardRecord>,
    previous: Option<&'a AssignmentDocument>,
    base_epoch: u64,
) -> Cow<'a, AssignmentDocument> {
    let mut doc =
        AssignmentDocument::from_shards(shard_group, base_epoch + 1, shards, std::iter::empty());
    if let Some(prev) = previous
        && prev.shard_group == doc.shard_group
        && prev.api_version == doc.api_version
        && prev.kind == doc.kind
        && prev.shards == doc.shards
        && prev.pods == doc.pods
    {
        return Cow::Borrowed(prev);
    }
    doc.pods.retain(|_, p| !p.is_empty());
    Cow::Owned(doc)
}

fn active(owner: &str, standbys: &[&str]) -> ShardRecord {
    ShardRecord {
        owner: Some(owner.into()),
        standbys: standbys.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

fn revoking(owner: &str, to: &str) -> ShardRecord {
    ShardRecord {
        owner: Some(owner.into()),
        state: ShardPhase::Revoking,
        handoff: Some(Box::new(Handoff {
            to: Some(to.into()),
            since: jiff::Timestamp::UNIX_EPOCH,
            epoch: 3,
            lease_counter: None,
        })),
        ..Default::default()
    }
}

fn published() -> AssignmentDocument {
    let shards = BTreeMap::from([
        ("s-0".to_owned(), active("a", &["b"])),
        ("s-1".to_owned(), active("b", &[])),
        ("s-2".to_owned(), revoking("a", "c")),
        (
            "s-3".to_owned(),
            ShardRecord {
                state: ShardPhase::Pending,
                ..Default::default()
            },
        ),
        ("s-4".to_owned(), active("c", &["a", "b"])),
    ]);
    let mut doc = AssignmentDocument::from_shards("prod/orders", 7, shards, std::iter::empty());
    doc.pods.retain(|_, p| !p.is_empty());
    doc
}

/// Every record of `doc` kept, except those in `new` (built anew,
/// `None`: left out) and the ids of `added`.
fn records<'a>(
    doc: &'a AssignmentDocument,
    new: &'a BTreeMap<String, Option<ShardRecord>>,
) -> NextRecords<'a> {
    let mut ids: Vec<&str> = doc.shards.keys().map(String::as_str).collect();
    ids.extend(new.keys().map(String::as_str));
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .filter_map(|id| match new.get(id) {
            Some(None) => None,
            Some(Some(record)) => Some((id, NextRecord::New(Box::new(record.clone())))),
            None => Some((id, NextRecord::Kept(&doc.shards[id]))),
        })
        .collect()
}

fn owned(records: &NextRecords<'_>) -> BTreeMap<String, ShardRecord> {
    records
        .iter()
        .map(|(id, r)| ((*id).to_owned(), r.get().clone()))
        .collect()
}

/// Changes, when given, are to `doc` and name every shard whose record
/// and every pod whose lists differ between `doc` and `next` (an encode
/// takes every chunk without one as `doc` had it).
fn assert_changes_cover(
    doc: &AssignmentDocument,
    next: &AssignmentDocument,
    changes: Option<&crate::codec::Changes>,
) {
    let Some(changes) = changes else { return };
    assert_eq!(changes.base_epoch(), doc.epoch);
    let found = crate::codec::Changes::between(doc, next);
    for pod in found.pods() {
        assert!(changes.pods().contains(pod), "pod {pod} not in {changes:?}");
    }
    for shard in found.shards() {
        assert!(
            changes.shards().contains(shard),
            "shard {shard} not in {changes:?}"
        );
    }
}

/// `next_document` decides as [`rebuilt`]: the same document, borrowed
/// exactly when that one is (returned: whether it is).
fn check(
    group: &str,
    doc: &AssignmentDocument,
    new: &BTreeMap<String, Option<ShardRecord>>,
) -> bool {
    let records = records(doc, new);
    let expected = rebuilt(group.into(), owned(&records), Some(doc), 9);
    // Told that the document indexes its shards (as the plan's memory
    // tells of one it built), it decides the same without checking.
    if indexes_its_shards(doc) {
        let (told, changes) = next_document(
            group.into(),
            self::records(doc, new),
            Some(doc),
            true,
            9,
            &mut None,
        );
        assert_eq!(told.as_ref(), expected.as_ref(), "{new:?}");
        assert_changes_cover(doc, &told, changes.as_ref());
        assert_eq!(
            matches!(told, Cow::Borrowed(_)),
            matches!(expected, Cow::Borrowed(_))
        );
    }
    // Built from a copy made beforehand, the same document and changes.
    let mut copy = Some(PublishedCopy::of(doc));
    let (copied, copied_changes) = next_document(
        group.into(),
        self::records(doc, new),
        Some(doc),
        indexes_its_shards(doc),
        9,
        &mut copy,
    );
    assert_eq!(copied.as_ref(), expected.as_ref(), "{new:?}");
    // Taken exactly when the document is built from it: a changed document
    // of the same shards.
    assert_eq!(
        copy.is_none(),
        matches!(copied, Cow::Owned(_)) && copied.shards.keys().eq(doc.shards.keys()),
        "{new:?}"
    );
    assert_changes_cover(doc, &copied, copied_changes.as_ref());
    let (got, changes) = next_document(group.into(), records, Some(doc), false, 9, &mut None);
    assert_eq!(
        changes.as_ref().map(|c| (c.pods(), c.shards())),
        copied_changes.as_ref().map(|c| (c.pods(), c.shards())),
        "{new:?}"
    );
    assert_changes_cover(doc, &got, changes.as_ref());
    let borrowed = matches!(got, Cow::Borrowed(_));
    assert_eq!(borrowed, matches!(expected, Cow::Borrowed(_)), "{new:?}");
    if borrowed {
        assert!(std::ptr::eq(got.as_ref(), doc), "{new:?}");
    } else {
        assert_eq!(got.epoch, 10, "{new:?}");
    }
    assert_eq!(got.as_ref(), expected.as_ref(), "{new:?}");
    borrowed
}

#[test]
fn kept_records_decide_as_rebuilt_ones() {
    let doc = published();
    let none = BTreeMap::new();
    // Everything kept: the published document itself.
    assert!(check("prod/orders", &doc, &none));
    // The same records built anew: still unchanged.
    let same: BTreeMap<_, _> = doc
        .shards
        .iter()
        .map(|(id, r)| (id.clone(), Some(r.clone())))
        .collect();
    assert!(check("prod/orders", &doc, &same));
    // Another group's name.
    assert!(!check("prod/other", &doc, &none));
    // One shard moved, its standby dropped, a revoke completed or
    // started, a pod's last shard gone, a new pod.
    for (id, record) in [
        ("s-1", active("c", &[])),
        ("s-0", active("a", &[])),
        ("s-2", active("c", &[])),
        ("s-3", active("b", &[])),
        ("s-4", revoking("c", "d")),
        ("s-4", active("d", &["b", "b"])),
        (
            "s-0",
            ShardRecord {
                state: ShardPhase::Complete,
                ..active("a", &["b"])
            },
        ),
    ] {
        check(
            "prod/orders",
            &doc,
            &BTreeMap::from([(id.into(), Some(record))]),
        );
    }
    // Several at once.
    check(
        "prod/orders",
        &doc,
        &BTreeMap::from([
            ("s-0".into(), Some(active("c", &[]))),
            ("s-1".into(), Some(revoking("b", "a"))),
            ("s-4".into(), Some(active("b", &["c"]))),
        ]),
    );
    // A shard added (first, between, last) or removed.
    for id in ["r-0", "s-11", "t-0"] {
        check(
            "prod/orders",
            &doc,
            &BTreeMap::from([(id.into(), Some(active("a", &[])))]),
        );
    }
    for id in ["s-0", "s-4"] {
        check("prod/orders", &doc, &BTreeMap::from([(id.into(), None)]));
    }
}

#[test]
fn pod_lists_that_do_not_index_the_shards_are_rewritten() {
    let none = BTreeMap::new();
    let edits: [fn(&mut AssignmentDocument); 6] = [
        // A pod with nothing.
        |doc| {
            doc.pods.insert("z".into(), Default::default());
        },
        // A pod missing.
        |doc| {
            doc.pods.remove("c");
        },
        // A list out of order.
        |doc| {
            doc.pods
                .get_mut("a")
                .unwrap()
                .active
                .insert(0, "s-4".into())
        },
        // A shard missing from a list, or listed in the wrong one.
        |doc| doc.pods.get_mut("b").unwrap().standby.clear(),
        |doc| {
            let a = doc.pods.get_mut("a").unwrap();
            let id = a.revoking.pop().unwrap();
            a.active.push(id);
        },
        // A shard listed once too often.
        |doc| doc.pods.get_mut("b").unwrap().active.push("s-1".into()),
    ];
    for edit in edits {
        let mut doc = published();
        edit(&mut doc);
        check("prod/orders", &doc, &none);
        check(
            "prod/orders",
            &doc,
            &BTreeMap::from([("s-1".into(), Some(active("c", &["a"])))]),
        );
        assert!(matches!(
            next_document(
                "prod/orders".into(),
                records(&doc, &none),
                Some(&doc),
                false,
                9,
                &mut None
            )
            .0,
            Cow::Owned(_)
        ));
    }
}

#[test]
fn without_a_published_document_every_record_is_new() {
    let doc = published();
    let none = BTreeMap::new();
    let records = records(&doc, &none);
    let expected = rebuilt("prod/orders".into(), owned(&records), None, 9);
    let (got, changes) = next_document("prod/orders".into(), records, None, false, 9, &mut None);
    assert!(changes.is_none());
    assert!(matches!(got, Cow::Owned(_)));
    assert_eq!(got, expected);
    assert_eq!(got.epoch, 10);
}

#[test]
fn lineage_is_added_to_kept_records_without_parents() {
    let mut doc = published();
    doc.shards.get_mut("s-1").unwrap().parents = vec!["s-9".into()];
    let none = BTreeMap::new();
    let mut records = records(&doc, &none);
    let lineage = BTreeMap::from([
        ("s-0".to_owned(), vec!["s-8".to_owned()]),
        ("s-1".to_owned(), vec!["s-7".to_owned()]),
        ("x-0".to_owned(), vec!["s-6".to_owned()]),
    ]);
    add_lineage(&mut records, &lineage);
    let mut expected = doc.shards.clone();
    expected.get_mut("s-0").unwrap().parents = vec!["s-8".into()];
    assert_eq!(owned(&records), expected);
    assert!(matches!(records[0].1, NextRecord::New(_)));
    assert!(matches!(records[1].1, NextRecord::Kept(_)));
}

/// A xorshift generator: the cases below are the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n as u64).expect("below n")
    }

    /// A record over pods `a` to `d`: any state, maybe no owner, standbys
    /// that may repeat or name the owner, maybe parents.
    fn record(&mut self) -> ShardRecord {
        const PODS: [&str; 4] = ["a", "b", "c", "d"];
        let states = [
            ShardPhase::Active,
            ShardPhase::Active,
            ShardPhase::Revoking,
            ShardPhase::Held,
            ShardPhase::Pending,
            ShardPhase::Complete,
        ];
        let mut record = ShardRecord {
            state: states[self.below(states.len())],
            owner: (self.below(6) != 0).then(|| PODS[self.below(PODS.len())].to_owned()),
            ..Default::default()
        };
        for _ in 0..self.below(3) {
            record
                .standbys
                .push(PODS[self.below(PODS.len())].to_owned());
        }
        if self.below(4) == 0 {
            record.parents.push("p-0".into());
        }
        record
    }
}

/// Published documents (most indexing their shards, some not) and next
/// records (kept, rebuilt equal, changed, dropped, added) drawn at random:
/// every one decided as the straightforward construction decides it.
#[test]
fn random_plans_decide_as_rebuilt_ones() {
    let mut rng = Rng(0x5eed_5eed_5eed_5eed);
    let (mut borrowed, mut owned) = (0, 0);
    for _ in 0..3000 {
        let shards: BTreeMap<String, ShardRecord> = (0..rng.below(7))
            .map(|i| (format!("s-{i}"), rng.record()))
            .collect();
        let mut doc = AssignmentDocument::from_shards("prod/orders", 7, shards, std::iter::empty());
        doc.pods.retain(|_, p| !p.is_empty());
        match rng.below(12) {
            0 => {
                doc.pods.insert("e".into(), Default::default());
            }
            1 => {
                let pod = doc.pods.keys().next().cloned();
                pod.map(|pod| doc.pods.remove(&pod));
            }
            2 => doc
                .pods
                .entry("b".into())
                .or_default()
                .standby
                .push("s-1".into()),
            _ => {}
        }
        let mut new = BTreeMap::new();
        for id in doc.shards.keys() {
            match rng.below(20) {
                0..=11 => {}
                12..=14 => {
                    new.insert(id.clone(), Some(doc.shards[id].clone()));
                }
                15..=18 => {
                    new.insert(id.clone(), Some(rng.record()));
                }
                _ => {
                    new.insert(id.clone(), None);
                }
            }
        }
        if rng.below(10) == 0 {
            new.insert(format!("s-{}x", rng.below(7)), Some(rng.record()));
        }
        let group = if rng.below(20) == 0 {
            "prod/other"
        } else {
            "prod/orders"
        };
        if check(group, &doc, &new) {
            borrowed += 1;
        } else {
            owned += 1;
        }
    }
    // Both outcomes were drawn often.
    assert!(
        borrowed > 300 && owned > 300,
        "{borrowed} borrowed, {owned} owned"
    );
}
