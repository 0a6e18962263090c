//! Throughput balance (`balance: throughput`): each shard weighs its measured
//! load, and every pod's load is kept within a band around its fair share.
//!
//! 1. Stickiness: every shard whose previous owner is eligible stays there
//!    (a pod over `maxShardsPerPod` keeps the shards with the lowest
//!    rendezvous score and releases the rest: required moves).
//! 2. Free shards (new, orphaned, released) go heaviest first to the pod
//!    with the least load per unit of capacity (then the fewest shards, then
//!    the pod's hash); a new child goes to a parent's owner while that keeps
//!    the owner inside the band.
//! 3. Hysteresis: nothing else moves while every pod is inside the band, or
//!    outside it by no more than [`TRIGGER_SIGMAS`] standard errors of its
//!    measured load ([`fair`]). Noise alone therefore never moves a shard.
//! 4. When a pod is outside the band, [`repair`] moves the fewest shards it
//!    can find that bring every pod back, each move the one that brings the
//!    most load back inside (see its header), within the optional-move
//!    budget.
//!
//! In a pool of several throughput groups, each pod starts with the load
//! the pool's other groups put on it (`PlanInput::pool_load`): fair shares
//! and the band are judged on a pod's whole load, and only this group's
//! shards move.
//!
//! Arithmetic is in `f64` in a fixed order, so the same input gives the same
//! output on every machine.

mod fair;
mod hand_over;
mod placement;
mod repair;

use crate::model::{Class, Model, NONE};
use crate::owners::{Owners, Release};
use crate::types::{DEFAULT_BAND_PERCENT, PlanOptions, PodThroughput, Rebalance, ThroughputReport};

pub use fair::{SETTLE_SIGMAS, TRIGGER_SIGMAS, shares as fair_shares};
use placement::Placement;

/// Places every readable shard of `model` by throughput. `budget` bounds
/// the optional moves (0 with `rebalance: requiredOnly`), `cap` the shards
/// per pod (`u64::MAX`: none).
pub(crate) fn place(model: &Model<'_>, options: &PlanOptions, budget: u64, cap: u64) -> Owners {
    let band = f64::from(options.band_percent.unwrap_or(DEFAULT_BAND_PERCENT)) / 100.0;
    let mut placement = Placement::new(model, cap);
    if !model.pods.is_empty() {
        placement.keep_sticky();
        placement.place_free(band);
        placement.pushed = fair::pushed(&placement);
    }
    let before = fair::Gauge::new(&placement, band);
    let out_of_band = before.outside_count(&placement);
    let budget = if options.rebalance == Rebalance::RequiredOnly {
        0
    } else {
        budget
    };
    if out_of_band > 0 && budget > 0 {
        repair::run(&mut placement, band, budget);
    }
    // Optional moves: shards that left an eligible previous owner that
    // did not have to release them.
    let mut moves = 0u32;
    for (s, rec) in model.shards.iter().enumerate() {
        let owner = placement.owner[s];
        if rec.class == Class::Readable
            && rec.prev_owner != NONE
            && owner != NONE
            && owner != rec.prev_owner
            && placement.release[s] != Release::Required
        {
            placement.release[s] = Release::Optional;
            moves += 1;
        }
    }
    let after = fair::Gauge::new(&placement, band);
    let report = ThroughputReport {
        pods: model
            .pods
            .iter()
            .enumerate()
            .map(|(e, pod)| {
                (
                    pod.name.to_owned(),
                    PodThroughput {
                        load: rounded(placement.load[e]),
                        fair: rounded(after.fair[e]),
                        noise: rounded(after.sigma[e]),
                    },
                )
            })
            .collect(),
        out_of_band,
        still_out_of_band: after.outside_count(&placement),
        moves,
    };
    Owners {
        loads: placement
            .members
            .iter()
            .map(|list| list.len() as u64)
            .collect(),
        owner: placement.owner,
        release: placement.release,
        throughput: Some(report),
    }
}

/// A non-negative `f64` rounded to the nearest integer (saturating).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to u64's range first
fn rounded(x: f64) -> u64 {
    x.round().clamp(0.0, u64::MAX as f64) as u64
}
