//! shardring's assignment engine: a pure, deterministic function from shards,
//! pods, the previous assignment and options to a balanced, sticky assignment.
//! No I/O, no clocks, no randomness: the same input gives the same output on
//! every machine and every release.
//!
//! The pipeline of [`plan`]: [`model`] validates and interns the input
//! (sorting pods and shards once, so input order never matters), [`ring`]
//! builds the hash ring (or [`EngineMemory`] derives it from the caller's
//! last one, and keeps the shard table of the model: [`plan_with`]),
//! [`owners`] places owners under quotas with stickiness ([`throughput`] by
//! measured load, within a band), [`standby`] adds backups, and `output`
//! names the result.
//! The separate ExplicitHashKey generator behind `shardring-dev hash-keys`
//! lives in `hash_keys`.

pub mod error;
pub mod hash;
pub mod hash_keys;
mod last_plan;
mod memory;
pub mod model;
mod output;
pub mod owners;
pub mod pool;
pub mod quota;
pub mod ring;
pub mod standby;
pub mod throughput;
pub mod types;

pub use error::PlanError;
use last_plan::LastPlan;
pub use memory::EngineMemory;
pub use types::*;

/// Plans an assignment.
///
/// Unknown parent ids (absent from `input.shards`) count as complete: Kinesis
/// trims a parent after its retention period, long after it was read.
/// Previous entries for shards absent from the input are ignored; previous
/// owners absent from the eligible pods make their shards required moves.
pub fn plan(input: &PlanInput) -> Result<PlanOutput, PlanError> {
    plan_with(input, &mut EngineMemory::default())
}

/// [`plan`], on the ring and the shard table kept in `memory` by the
/// caller's last plan (the same output: they are the ones [`plan`] builds,
/// only found quicker), leaving this plan's there for the next; and, when
/// this plan's previous assignment is the last plan's output, on that
/// plan's owners and assignment ([`last_plan`]).
pub fn plan_with(input: &PlanInput, memory: &mut EngineMemory) -> Result<PlanOutput, PlanError> {
    planned(input, memory, true)
}

/// [`plan_with`] for a plan beside the caller's line of plans (the same
/// input with other options, to learn what they would do): it uses the
/// kept ring and shard table but neither builds on the last plan's owners
/// nor leaves its own, so the next [`plan_with`] still builds on the last.
pub fn plan_aside(input: &PlanInput, memory: &mut EngineMemory) -> Result<PlanOutput, PlanError> {
    planned(input, memory, false)
}

fn planned(
    input: &PlanInput,
    memory: &mut EngineMemory,
    in_line: bool,
) -> Result<PlanOutput, PlanError> {
    let (table, rings, last) = memory.shard_table(input);
    let table_kept = matches!(table, std::borrow::Cow::Borrowed(_));
    let mut previously = in_line
        .then(|| last.take())
        .flatten()
        .filter(|l| table_kept && l.plans_again(input));
    let kept_pods = rings.pods();
    let mut patchable = false;
    let model = model::Model::build_with(input, &table, |pods| {
        let owners = previously.as_mut()?.kept_owners(input, kept_pods?, pods)?;
        patchable = true;
        Some(owners)
    })?;
    let (ring, generation) = rings.ring_of(&model.pods);
    let owners = owners::place(&model, &input.options, &ring);
    let standbys = standby::place(&model, &input.options, &ring, &owners.owner);
    let (output, same_as_previous) = match previously.filter(|_| patchable) {
        Some(previously) => {
            let (output, changed) = output::patch(&model, &owners, previously.assignment);
            (output, !changed)
        }
        None => (output::build(&model, &owners, &standbys), false),
    };
    if in_line {
        *last = generation.filter(|_| table_kept).and_then(|generation| {
            let mut kept = LastPlan::of(input, generation, &owners.owner, &output.assignment)?;
            if same_as_previous {
                // Its assignment is still the previous one (a no-op plan,
                // as a status write's echo makes): still checked.
                kept.checked_against(&input.previous);
            }
            Some(kept)
        });
    }
    if patchable {
        memory.note_patched();
    }
    Ok(output)
}
