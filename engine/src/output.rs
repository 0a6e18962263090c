//! Turns the index-based placement back into the public [`PlanOutput`]:
//! names, sorted lists, loads and the classified move list.

use std::collections::BTreeMap;

use crate::model::{Class, Model, NONE};
use crate::owners::{Owners, Release};
use crate::types::{MoveKind, PlanOutput, ShardAssignment, ShardMove};

/// Builds the output; `standbys[s]` are the standby pod indices of shard `s`.
pub fn build(model: &Model<'_>, owners: &Owners, standbys: &[Vec<u32>]) -> PlanOutput {
    let pods = &model.pods;
    let mut pending = Vec::new();
    let mut unassigned = Vec::new();
    let mut move_list = Vec::new();
    let mut entries = Vec::with_capacity(model.shards.len());
    for (s, rec) in model.shards.iter().enumerate() {
        let owner = owners.owner[s];
        match rec.class {
            Class::Complete => continue,
            Class::Pending => pending.push(rec.id.to_owned()),
            Class::Readable if owner == NONE => unassigned.push(rec.id.to_owned()),
            Class::Readable => {}
        }
        let owner_name = (owner != NONE).then(|| pods[owner as usize].name);
        if let (Some(prev), Some(to)) = (rec.previous, owner_name)
            && prev.owner() != to
        {
            let kind = if owners.release[s] == Release::Optional {
                MoveKind::Optional
            } else {
                MoveKind::Required
            };
            move_list.push(ShardMove {
                shard: rec.id.to_owned(),
                from: prev.owner().to_owned(),
                to: to.to_owned(),
                kind,
            });
        }
        entries.push((
            rec.id.to_owned(),
            ShardAssignment {
                owner: owner_name.map(str::to_owned),
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
    PlanOutput {
        // Entries are already sorted by id, which makes this a linear bulk build.
        assignment: entries.into_iter().collect::<BTreeMap<_, _>>(),
        pending,
        unassigned,
        loads: pods
            .iter()
            .zip(&owners.loads)
            .map(|(p, &l)| (p.name.to_owned(), l))
            .collect(),
        moves: move_list.len() as u64,
        move_list,
        throughput: owners.throughput.clone(),
    }
}
