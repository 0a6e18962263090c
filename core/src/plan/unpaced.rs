//! The engine asked again with pacing lifted, to learn what pacing holds
//! back: whether the rebalance delay and the move budget keep optional
//! moves from happening at all (for when to look again), and how many
//! optional moves the move budget alone defers (the `MovesDeferred` reason
//! of `Balanced` and the `shardring_group_moves_deferred` gauge). The input
//! is left as it was found: its pacing options are swapped out and back,
//! not the 20,000-shard input cloned.

use crate::engine::{self, PlanInput, PlanOutput, Rebalance};

/// The optional moves the engine makes from `input` with `rebalance` and
/// `max_optional_moves` in place of its own pacing options; `None` when it
/// refuses the input (it accepted the same input paced, so only a bug).
fn optional_moves_with(
    input: &mut PlanInput,
    memory: &mut engine::EngineMemory,
    rebalance: Rebalance,
    max_optional_moves: Option<u32>,
) -> Option<u64> {
    let paced = (input.options.rebalance, input.options.max_optional_moves);
    input.options.rebalance = rebalance;
    input.options.max_optional_moves = max_optional_moves;
    let moves = engine::plan_aside(input, memory)
        .ok()
        .map(|o| o.optional_moves());
    (input.options.rebalance, input.options.max_optional_moves) = paced;
    moves
}

/// Whether the engine, free of the rebalance delay and the move budget,
/// would make optional moves from `input`.
pub(super) fn rebalances_unpaced(input: &mut PlanInput, memory: &mut engine::EngineMemory) -> bool {
    optional_moves_with(input, memory, Rebalance::All, None).is_some_and(|moves| moves > 0)
}

/// How many optional moves the move budget held back from `output`, the
/// paced plan of `input`: none unless the plan used every move the budget
/// allowed; else the optional moves of the same plan without the budget
/// (the rebalance delay still applies: moves it holds back are expected
/// after a pod change and are not the budget's) beyond the ones made.
pub(super) fn deferred_by_budget(
    input: &mut PlanInput,
    memory: &mut engine::EngineMemory,
    output: &PlanOutput,
) -> u64 {
    let Some(allowed) = input.options.max_optional_moves else {
        return 0;
    };
    let made = output.optional_moves();
    if made < u64::from(allowed) {
        return 0;
    }
    let rebalance = input.options.rebalance;
    optional_moves_with(input, memory, rebalance, None)
        .map_or(0, |unbudgeted| unbudgeted.saturating_sub(made))
}
