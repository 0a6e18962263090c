//! Turns the index-based placement back into the public [`PlanOutput`]:
//! names, sorted lists, loads and the classified move list. Built whole
//! ([`build`]), or patched from the output of the caller's last plan when
//! that output is this plan's previous assignment ([`patch`]): the same
//! output, writing only the entries whose owner changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{Class, Model, NONE, ShardRec};
use crate::owners::{Owners, Release};
use crate::types::{MoveKind, PlanOutput, ShardAssignment, ShardMove};

/// Builds the output; `standbys[s]` are the standby pod indices of shard `s`.
pub fn build(model: &Model<'_>, owners: &Owners, standbys: &[Vec<u32>]) -> PlanOutput {
    let pods = &model.pods;
    let mut lists = Lists::default();
    let mut entries = Vec::with_capacity(model.shards.len());
    for (s, rec) in model.shards.iter().enumerate() {
        let owner = owners.owner[s];
        if !lists.note(s, rec, owner, model, owners) {
            continue;
        }
        entries.push((
            rec.id.to_owned(),
            ShardAssignment {
                owner: (owner != NONE).then(|| pods[owner as usize].name.to_owned()),
                standbys: standbys
                    .get(s)
                    .map(|list| {
                        list.iter()
                            .map(|&p| pods[p as usize].name.to_owned())
                            .collect()
                    })
                    .unwrap_or_default(),
            },
        ));
    }
    // Entries are already sorted by id, which makes this a linear bulk build.
    lists.finish(model, owners, Arc::new(entries.into_iter().collect()))
}

/// [`build`] for a plan without standbys whose previous assignment is
/// `assignment` (every previous entry of `model` is `assignment`'s owner of
/// its shard, and `assignment` has an entry for each shard of `model` that
/// is not complete, without standbys): `assignment` with the owners that
/// changed written, in place when nothing else holds it; and whether any
/// owner changed.
pub fn patch(
    model: &Model<'_>,
    owners: &Owners,
    mut assignment: Arc<BTreeMap<String, ShardAssignment>>,
) -> (PlanOutput, bool) {
    let mut changed = false;
    let pods = &model.pods;
    let mut lists = Lists::default();
    let entries = Arc::make_mut(&mut assignment);
    for (s, rec) in model.shards.iter().enumerate() {
        let owner = owners.owner[s];
        if !lists.note(s, rec, owner, model, owners) {
            continue;
        }
        // The entry names the previous owner: the same pod keeps it as is.
        let kept = match rec.previous {
            None => owner == NONE,
            Some(_) => owner != NONE && owner == rec.prev_owner,
        };
        if !kept {
            changed = true;
            let entry = entries
                .get_mut(rec.id)
                .expect("the last plan's assignment lists every shard that is not complete");
            entry.owner = (owner != NONE).then(|| pods[owner as usize].name.to_owned());
        }
    }
    let output = lists.finish(model, owners, assignment);
    debug_assert_eq!(output, build(model, owners, &[]), "a patched output");
    (output, changed)
}

/// What both ways of naming the result list beside the assignment.
#[derive(Default)]
struct Lists {
    pending: Vec<String>,
    unassigned: Vec<String>,
    moves: Vec<ShardMove>,
}

impl Lists {
    /// Notes shard `s` (`rec`, placed on `owner`) in the lists; whether it
    /// has an entry in the assignment (it is not complete).
    fn note(
        &mut self,
        s: usize,
        rec: &ShardRec<'_>,
        owner: u32,
        model: &Model<'_>,
        owners: &Owners,
    ) -> bool {
        match rec.class {
            Class::Complete => return false,
            Class::Pending => self.pending.push(rec.id.to_owned()),
            Class::Readable if owner == NONE => self.unassigned.push(rec.id.to_owned()),
            Class::Readable => {}
        }
        if let Some(prev) = rec.previous
            && owner != NONE
            // The same eligible pod, by index: no name compared.
            && owner != rec.prev_owner
        {
            let to = model.pods[owner as usize].name;
            debug_assert_ne!(prev.owner(), to, "shard {} moved to its owner", rec.id);
            let kind = if owners.release[s] == Release::Optional {
                MoveKind::Optional
            } else {
                MoveKind::Required
            };
            self.moves.push(ShardMove {
                shard: rec.id.to_owned(),
                from: prev.owner().to_owned(),
                to: to.to_owned(),
                kind,
            });
        }
        true
    }

    fn finish(
        self,
        model: &Model<'_>,
        owners: &Owners,
        assignment: Arc<BTreeMap<String, ShardAssignment>>,
    ) -> PlanOutput {
        PlanOutput {
            assignment,
            pending: self.pending,
            unassigned: self.unassigned,
            loads: model
                .pods
                .iter()
                .zip(&owners.loads)
                .map(|(p, &l)| (p.name.to_owned(), l))
                .collect(),
            moves: self.moves.len() as u64,
            move_list: self.moves,
            throughput: owners.throughput.clone(),
        }
    }
}
