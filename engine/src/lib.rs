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
/// only found quicker), leaving this plan's there for the next.
pub fn plan_with(input: &PlanInput, memory: &mut EngineMemory) -> Result<PlanOutput, PlanError> {
    let (table, rings) = memory.shard_table(input);
    let model = model::Model::build(input, &table)?;
    let ring = rings.ring_of(&model.pods);
    let owners = owners::place(&model, &input.options, &ring);
    let standbys = standby::place(&model, &input.options, &ring, &owners.owner);
    Ok(output::build(&model, &owners, &standbys))
}
