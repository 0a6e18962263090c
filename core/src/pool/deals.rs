//! One kind of the pool's deal ([`DealBook`]): the ⌈⌉ quotas of the
//! count-mode groups, or the standby slots of the groups with standbys.
//! It keeps the last deal with what it was dealt from, and deals again
//! only when that changed, from what every group holds now and the
//! previous deal (so the groups apply rows of one decision, and a pool at
//! rest deals nothing).

use std::collections::BTreeMap;

use crate::engine::Pod;
use crate::engine::pool::{Ceilings, PoolGroup, PoolInput, deal};

/// What a deal is made from: when it is the same, so is the deal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DealtFrom {
    /// Each pool of the balance: its name, eligible pods and cap per pod
    /// and group (0: none), sorted by name.
    pub(super) pools: Vec<(String, Vec<Pod>, u32)>,
    /// Each group: its name, its pool and its units (shards or slots),
    /// sorted by name.
    pub(super) groups: Vec<(String, String, u64)>,
    /// The groups whose units are where something else put them, not
    /// where the deal says (the standby slots of a group whose standbys
    /// take every other pod are where its owners are not), with what each
    /// pod holds of them: when that changes, so may the deal of the
    /// others around them.
    pub(super) forced: Vec<(String, BTreeMap<String, u64>)>,
}

/// A group's row of a deal, and the other groups whose rows a new deal
/// changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Row {
    pub(super) pods: Option<Vec<String>>,
    pub(super) changed: Vec<String>,
    /// The deal was made again for this row (its inputs changed).
    pub(super) dealt: bool,
}

/// The last deal of one kind and what it was dealt from.
#[derive(Debug, Clone, Default)]
pub(super) struct DealBook {
    last: Option<(DealtFrom, Ceilings)>,
}

impl DealBook {
    /// The row of `group` in the deal over `from` (no row when fewer than
    /// two groups take part, or `group` is not one of them: it still deals
    /// again when the inputs changed, and says whom that woke). `holdings`
    /// reads what each pod holds of a group now, only when the deal must
    /// be made again.
    pub(super) fn row(
        &mut self,
        group: &str,
        from: DealtFrom,
        holdings: impl Fn(&str) -> BTreeMap<String, u64>,
    ) -> Row {
        if from.groups.len() < 2 {
            return Row::default();
        }
        // A group outside the deal (another mode's) gets no row, but still
        // deals again when the deal's inputs changed: a change only it saw
        // (a returning pod's hold ending in its document) must wake the
        // groups whose rows it changes.
        let member = from.groups.iter().any(|(g, _, _)| g == group);
        let mut changed = Vec::new();
        let dealt = self.last.as_ref().is_none_or(|(last, _)| *last != from);
        if dealt {
            let before = self.last.take().map(|(_, c)| c).unwrap_or_default();
            let ceilings = deal(&input(&from, &before, holdings));
            changed = ceilings
                .iter()
                .filter(|(name, row)| *name != group && before.get(*name) != Some(*row))
                .map(|(name, _)| name.clone())
                .collect();
            self.last = Some((from, ceilings));
        }
        let ceilings = self.last.as_ref().map(|(_, c)| c);
        Row {
            pods: member.then(|| {
                ceilings
                    .and_then(|c| c.get(group))
                    .cloned()
                    .unwrap_or_default()
            }),
            changed,
            dealt,
        }
    }
}

/// The engine's input for a deal over `from`, with `before` the previous
/// deal. One pool: every group on its pods, as before pools could share
/// pods. Several: each group on its own pool's pods and cap.
fn input(
    from: &DealtFrom,
    before: &Ceilings,
    holdings: impl Fn(&str) -> BTreeMap<String, u64>,
) -> PoolInput {
    let shared = from.pools.len() > 1;
    let mut pods: Vec<Pod> = Vec::new();
    for (_, pool_pods, _) in &from.pools {
        for pod in pool_pods {
            if !pods.iter().any(|p| p.name == pod.name) {
                pods.push(pod.clone());
            }
        }
    }
    let pool = |name: &str| from.pools.iter().find(|(p, _, _)| p == name);
    PoolInput {
        pods,
        max_shards_per_pod: from.pools.first().map_or(0, |(_, _, cap)| *cap),
        groups: from
            .groups
            .iter()
            .map(|(name, pool_name, units)| {
                let own = pool(pool_name).filter(|_| shared);
                PoolGroup {
                    name: name.clone(),
                    readable: *units,
                    holdings: holdings(name),
                    previous: before.get(name).cloned().unwrap_or_default(),
                    pods: own.map(|(_, pods, _)| pods.clone()),
                    max_shards_per_pod: own.map(|(_, _, cap)| *cap),
                    fixed: from.forced.iter().any(|(forced, _)| forced == name),
                }
            })
            .collect(),
    }
}
