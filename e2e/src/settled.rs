//! When a scenario's assignment counts as settled for the pods that are
//! alive: every open shard active on a live pod, nothing revoking or
//! pending, no gone pod holding anything, the load spread within one, and
//! every pod that holds shards has processed a record. A pure check of the
//! published document, which [`crate::harness::Harness::wait_settled`]
//! polls.

use shardring_crds::{AssignmentDocument, ShardPhase};

/// `Ok` when `doc` is settled for the live pods and `open` shards, else
/// what is still missing.
pub(crate) fn settled(
    doc: &AssignmentDocument,
    open: &[String],
    live: &[String],
    has_read: impl Fn(&str) -> bool,
) -> Result<(), String> {
    // Pods with empty lists may be listed or not; a pod that is gone (or
    // being deleted) must not hold anything any more.
    if let Some((pod, _)) = doc.pods.iter().find(|(pod, a)| {
        let holds = !(a.active.is_empty() && a.revoking.is_empty() && a.standby.is_empty());
        holds && !live.contains(*pod)
    }) {
        return Err(format!(
            "{pod}, not a live pod, still holds shards (live: {live:?})"
        ));
    }
    for shard in open {
        match doc.shards.get(shard) {
            Some(r)
                if r.state == ShardPhase::Active
                    && r.owner.as_ref().is_some_and(|o| live.contains(o)) => {}
            Some(r) => {
                return Err(format!(
                    "open shard {shard} is {:?} on {:?}",
                    r.state, r.owner
                ));
            }
            None => return Err(format!("open shard {shard} is not in the document yet")),
        }
    }
    if let Some((shard, r)) = doc
        .shards
        .iter()
        .find(|(_, r)| matches!(r.state, ShardPhase::Revoking | ShardPhase::Pending))
    {
        return Err(format!("shard {shard} is {:?}", r.state));
    }
    let loads: Vec<usize> = live
        .iter()
        .map(|p| doc.pods.get(p).map_or(0, |a| a.active.len()))
        .collect();
    let (min, max) = (loads.iter().min(), loads.iter().max());
    if let (Some(min), Some(max)) = (min, max)
        && max - min > 1
    {
        return Err(format!("load spread {min}..{max} over {live:?}"));
    }
    for pod in live {
        let holds = doc.pods.get(pod).is_some_and(|a| !a.active.is_empty());
        if holds && !has_read(pod) {
            return Err(format!(
                "{pod} holds shards but has not processed a record yet"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use shardring_crds::assignment::{PodAssignment, ShardRecord};

    fn doc(pods: &[(&str, &[&str])], extra: &[(&str, ShardPhase)]) -> AssignmentDocument {
        let mut doc = AssignmentDocument::new("ns/orders", 1);
        for (pod, shards) in pods {
            doc.pods.insert(
                (*pod).to_owned(),
                PodAssignment {
                    active: shards.iter().map(|s| (*s).to_owned()).collect(),
                    ..PodAssignment::default()
                },
            );
            for shard in *shards {
                doc.shards.insert(
                    (*shard).to_owned(),
                    ShardRecord {
                        owner: Some((*pod).to_owned()),
                        state: ShardPhase::Active,
                        ..ShardRecord::default()
                    },
                );
            }
        }
        for (shard, state) in extra {
            doc.shards.insert(
                (*shard).to_owned(),
                ShardRecord {
                    state: *state,
                    ..ShardRecord::default()
                },
            );
        }
        doc
    }

    fn names(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn settled_needs_every_open_shard_active_on_a_live_reading_pod_and_balance() {
        let open = names(&["s0", "s1", "s2", "s3"]);
        let live = names(&["a", "b", "c"]);
        let good = doc(&[("a", &["s0", "s1"]), ("b", &["s2"]), ("c", &["s3"])], &[]);
        assert_eq!(settled(&good, &open, &live, |_| true), Ok(()));
        // A pod that has not read yet.
        let err = settled(&good, &open, &live, |p| p != "b").unwrap_err();
        assert!(err.contains("b holds shards"), "{err}");
        // A completed parent is fine; a pending child is not.
        let parent = doc(
            &[("a", &["s0", "s1"]), ("b", &["s2"]), ("c", &["s3"])],
            &[("p", ShardPhase::Complete)],
        );
        assert_eq!(settled(&parent, &open, &live, |_| true), Ok(()));
        let pending = doc(
            &[("a", &["s0", "s1"]), ("b", &["s2"]), ("c", &["s3"])],
            &[("k", ShardPhase::Pending)],
        );
        assert!(settled(&pending, &open, &live, |_| true).is_err());
        // Unbalanced, and a new pod with nothing yet.
        let skewed = doc(&[("a", &["s0", "s1", "s2"]), ("b", &["s3"])], &[]);
        assert!(settled(&skewed, &open, &names(&["a", "b"]), |_| true).is_err());
        let err = settled(&good, &open, &names(&["a", "b", "c", "d"]), |_| true).unwrap_err();
        assert!(err.contains("spread"), "{err}");
        // A gone pod still holding shards, and an open shard not published.
        let err = settled(&good, &open, &names(&["a", "b"]), |_| true).unwrap_err();
        assert!(err.contains("not a live pod"), "{err}");
        let err = settled(&good, &names(&["s0", "s9"]), &live, |_| true).unwrap_err();
        assert!(err.contains("s9"), "{err}");
    }
}
