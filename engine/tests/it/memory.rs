//! The caller's memory ([`EngineMemory`]) never changes an output: one
//! memory kept over a random sequence of plans (pods joining, leaving and
//! terminating, shards split, completed or re-read as a new list, the same
//! list changed in place, another consumer name or balance, pools and lists
//! too small to keep anything, inputs refused) gives exactly what a plan
//! without memory gives, at every step. And it keeps the shard table only
//! for the very list it was built of: the same `Arc` and consumer name
//! reuse it; another list (even of the same length), a list changed in
//! place or another name rebuild it, and each of those changes shows in the
//! output, so a stale table would too.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use shardring_engine::{
    Balance, EngineMemory, PlanInput, PlanOutput, Previous, ShardState, plan, plan_with,
};

use crate::common::*;

/// Plans `input` on `memory`: the output of a plan without memory.
fn as_fresh(input: &PlanInput, memory: &mut EngineMemory) -> PlanOutput {
    let kept = plan_with(input, memory).expect("a plannable input");
    assert_eq!(kept, plan(input).expect("a plannable input"));
    kept
}

/// The same list (the same `Arc`, the caller's topology shared again)
/// reuses the table, whatever else changed.
#[test]
fn the_same_list_reuses_the_table() {
    let mut input = input(ranged_shards(SHARDS), pods(POOL));
    let mut memory = EngineMemory::default();
    assert!(!memory.keeps_shard_table_of(&input));
    let first = as_fresh(&input, &mut memory);
    assert!(memory.keeps_shard_table_of(&input));
    input.previous = previous_of(&first);
    input.pods.push(pod("joined"));
    input.options.balance = Balance::HashRange;
    let shared = PlanInput {
        shards: Arc::clone(&input.shards),
        ..input.clone()
    };
    assert!(memory.keeps_shard_table_of(&shared));
    as_fresh(&shared, &mut memory);
    assert!(memory.keeps_shard_table_of(&input));
}

/// Another list rebuilds the table: the same shards in a new list, and a
/// new list of as many shards, one of them completed and one renamed (a
/// table kept for the old list would place them as they were).
#[test]
fn another_list_rebuilds_the_table() {
    let mut input = input(ranged_shards(SHARDS), pods(POOL));
    let mut memory = EngineMemory::default();
    let before = as_fresh(&input, &mut memory);
    input.shards = Arc::new((*input.shards).clone());
    assert!(!memory.keeps_shard_table_of(&input));
    assert_eq!(as_fresh(&input, &mut memory), before);
    assert!(memory.keeps_shard_table_of(&input));
    let mut list = (*input.shards).clone();
    list[0].state = ShardState::Complete;
    list[5].id = "shardId-renamed".into();
    input.shards = Arc::new(list);
    assert!(!memory.keeps_shard_table_of(&input));
    let after = as_fresh(&input, &mut memory);
    assert_ne!(after, before, "the change shows in the output");
    assert!(memory.keeps_shard_table_of(&input));
}

/// The caller's own list changed in place ([`Arc::make_mut`]) is a new
/// list: the memory's `Weak` makes `make_mut` move it first.
#[test]
fn a_list_changed_in_place_rebuilds_the_table() {
    let mut input = input(ranged_shards(SHARDS), pods(POOL));
    let mut memory = EngineMemory::default();
    let before = as_fresh(&input, &mut memory);
    let was = Arc::as_ptr(&input.shards);
    Arc::make_mut(&mut input.shards)[0].state = ShardState::Complete;
    assert!(!std::ptr::eq(Arc::as_ptr(&input.shards), was));
    assert!(!memory.keeps_shard_table_of(&input));
    assert_ne!(as_fresh(&input, &mut memory), before);
}

/// Another consumer name on the same list rebuilds the table (the name
/// moves every shard on the ring), and the first name again rebuilds it
/// again.
#[test]
fn another_consumer_name_rebuilds_the_table() {
    let mut input = input(ranged_shards(SHARDS), pods(POOL));
    let mut memory = EngineMemory::default();
    let orders = as_fresh(&input, &mut memory);
    input.options.consumer_name = "payments".into();
    assert!(!memory.keeps_shard_table_of(&input));
    let payments = as_fresh(&input, &mut memory);
    assert_ne!(payments, orders, "the name shows in the output");
    assert!(memory.keeps_shard_table_of(&input));
    input.options.consumer_name = "orders".into();
    assert!(!memory.keeps_shard_table_of(&input));
    assert_eq!(as_fresh(&input, &mut memory), orders);
}

/// A short list is planned on a table of its own and nothing is kept.
#[test]
fn a_short_list_keeps_no_table() {
    let input = input(ranged_shards(40), pods(POOL));
    let mut memory = EngineMemory::default();
    as_fresh(&input, &mut memory);
    assert!(!memory.keeps_shard_table_of(&input));
}

/// A pod change planned from the last plan's output builds on that plan's
/// owners and patches its assignment, and gives the output of a plan
/// without memory: a pod joining, a pod leaving, a pod coming back under
/// its name, a pod terminating, a capacity changed, with counts, key ranges
/// and a shard cap, alone and as a group of a pool. Plans whose
/// previous assignment is not the last output (a move held back by the
/// caller), of another list or with standbys build it whole, as before.
#[test]
fn a_pod_change_from_the_last_output_is_patched() {
    for (balance, pooled) in [
        (Balance::Count, false),
        (Balance::HashRange, false),
        (Balance::Count, true),
    ] {
        let mut input = input(ranged_shards(SHARDS), pods(POOL));
        input.options.balance = balance;
        input.options.max_shards_per_pod = 9;
        if pooled {
            // A group of a pool: the pool-wide deal gives some pods its
            // ⌈⌉ quotas.
            let dealt = input.pods.iter().step_by(3).map(|p| p.name.clone());
            input.ceilings = Some(dealt.collect());
        }
        let mut memory = EngineMemory::default();
        let mut out = as_fresh(&input, &mut memory);
        assert_eq!(memory.patched(), 0, "nothing to build on yet");
        let changes: [&dyn Fn(&mut PlanInput); 7] = [
            &|input| input.pods.push(pod("joined-a")),
            &|input| {
                input.pods.remove(3);
            },
            &|input| input.pods.retain(|p| p.name != "joined-a"),
            // The pod comes back under its name (a StatefulSet's).
            &|input| input.pods.push(pod("joined-a")),
            &|input| input.pods[10].terminating = true,
            &|input| input.pods[20].capacity = 3,
            &|input| input.pods.push(pod("joined-b")),
        ];
        for (n, change) in changes.iter().enumerate() {
            input.previous = previous_of(&out);
            change(&mut input);
            let before = memory.patched();
            out = as_fresh(&input, &mut memory);
            assert_eq!(memory.patched(), before + 1, "{balance:?}: change {n}");
            if balance == Balance::Count {
                assert!(out.moves > 0, "change {n} moves shards");
            }
        }
        // The caller held one move back: the previous is not the output.
        let mut held = (*previous_of(&out)).clone();
        let (id, owner) = held
            .iter()
            .next()
            .map(|(i, p)| (i.clone(), p.owner().to_owned()))
            .unwrap();
        let other = input
            .pods
            .iter()
            .find(|p| p.name != owner && !p.terminating)
            .unwrap()
            .name
            .clone();
        held.insert(id, Previous::Owner(other));
        input.previous = held.into();
        input.pods.push(pod("joined-c"));
        let before = memory.patched();
        out = as_fresh(&input, &mut memory);
        assert_eq!(memory.patched(), before, "{balance:?}: not the last output");
        // From that output again: patched again.
        input.previous = previous_of(&out);
        input.pods.push(pod("joined-d"));
        as_fresh(&input, &mut memory);
        assert_eq!(
            memory.patched(),
            before + 1,
            "{balance:?}: the last output again"
        );
    }
}

/// A plan aside (the same input with other options, as a caller asks what
/// its pacing holds back, after its plan) neither builds on the last plan
/// nor replaces it: the next plan in line still patches the last output.
#[test]
fn a_plan_aside_leaves_the_last_plan_to_build_on() {
    let mut input = input(ranged_shards(SHARDS), pods(POOL));
    input.options.max_optional_moves = Some(1);
    let mut memory = EngineMemory::default();
    let out = as_fresh(&input, &mut memory);
    input.previous = previous_of(&out);
    input.pods.push(pod("joined-a"));
    let out = as_fresh(&input, &mut memory);
    assert_eq!(memory.patched(), 1);
    let mut unpaced = input.clone();
    unpaced.options.max_optional_moves = None;
    let aside = shardring_engine::plan_aside(&unpaced, &mut memory).expect("plannable");
    assert_eq!(aside, plan(&unpaced).expect("plannable"));
    assert_ne!(aside, out, "the budget held moves back");
    assert_eq!(memory.patched(), 1);
    input.previous = previous_of(&out);
    input.pods.push(pod("joined-b"));
    as_fresh(&input, &mut memory);
    assert_eq!(memory.patched(), 2);
}

/// Standbys, another list and a memory's clone: built whole where the
/// patch cannot apply, and a clone patches a copy of its own (the
/// original's next plan is unchanged by the clone's).
#[test]
fn standbys_another_list_and_a_clone() {
    let mut input = input(ranged_shards(SHARDS), pods(POOL));
    input.options.standbys = 1;
    let mut memory = EngineMemory::default();
    let out = as_fresh(&input, &mut memory);
    input.previous = previous_of(&out);
    input.pods.push(pod("joined-a"));
    let out = as_fresh(&input, &mut memory);
    assert_eq!(memory.patched(), 0, "standbys");
    input.options.standbys = 0;
    input.previous = previous_of(&out);
    let out = as_fresh(&input, &mut memory);
    input.previous = previous_of(&out);
    input.shards = Arc::new((*input.shards).clone());
    let out = as_fresh(&input, &mut memory);
    assert_eq!(memory.patched(), 0, "another list");
    input.previous = previous_of(&out);
    input.pods.remove(0);
    let mut clone = memory.clone();
    let from_clone = as_fresh(&input, &mut clone);
    assert_eq!(clone.patched(), 1);
    assert_eq!(as_fresh(&input, &mut memory), from_clone);
    assert_eq!(memory.patched(), 1);
}

/// One change between two plans of the same caller.
#[derive(Debug, Clone)]
enum Step {
    /// Nothing changes (the next plan is a no-op on the kept memory).
    Same,
    /// A pod joins.
    Join,
    /// The pod at this index (modulo) leaves.
    Leave(usize),
    /// The pod at this index (modulo) starts terminating.
    Terminate(usize),
    /// The shard at this index (modulo) closes and splits into two
    /// children, in a new list.
    Split(usize),
    /// The shard at this index (modulo) is read to its end, in a new list.
    Complete(usize),
    /// The shard at this index (modulo) is completed in the caller's own
    /// list, changed in place where nobody else holds it
    /// ([`Arc::make_mut`]).
    CompleteInPlace(usize),
    /// The source is read again: the same shards in a new list.
    Reread,
    /// Another consumer name (other ring positions), same list.
    Rename,
    /// The other balance (count or hashRange), same list.
    Rebalance,
    /// Standbys on or off.
    Standbys,
    /// A pool too small to keep a ring.
    FewPods,
    /// A pool large enough again.
    ManyPods,
    /// A list too short to keep a table.
    FewShards,
    /// A long list again.
    ManyShards,
    /// A shard id listed twice (the input is refused), in a new list.
    Duplicate,
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => Just(Step::Same),
        4 => Just(Step::Join),
        3 => any::<usize>().prop_map(Step::Leave),
        2 => any::<usize>().prop_map(Step::Terminate),
        3 => any::<usize>().prop_map(Step::Split),
        2 => any::<usize>().prop_map(Step::Complete),
        2 => any::<usize>().prop_map(Step::CompleteInPlace),
        2 => Just(Step::Reread),
        1 => Just(Step::Rename),
        1 => Just(Step::Rebalance),
        1 => Just(Step::Standbys),
        1 => Just(Step::FewPods),
        1 => Just(Step::ManyPods),
        1 => Just(Step::FewShards),
        1 => Just(Step::ManyShards),
        1 => Just(Step::Duplicate),
    ]
}

/// Past the sizes from which the memory keeps a ring and a shard table.
const POOL: usize = 270;
const SHARDS: usize = 1_100;

fn apply(input: &mut PlanInput, step: &Step, joined: &mut usize) {
    let edit = |input: &mut PlanInput, f: &dyn Fn(&mut Vec<shardring_engine::Shard>)| {
        let mut list = (*input.shards).clone();
        f(&mut list);
        input.shards = Arc::new(list);
    };
    match *step {
        Step::Same => {}
        Step::Join => {
            *joined += 1;
            input.pods.push(pod(&format!("joined-{joined}")));
        }
        Step::Leave(at) if !input.pods.is_empty() => {
            let at = at % input.pods.len();
            input.pods.remove(at);
        }
        Step::Terminate(at) if !input.pods.is_empty() => {
            let at = at % input.pods.len();
            input.pods[at].terminating = true;
        }
        Step::Leave(_) | Step::Terminate(_) => {}
        Step::Split(at) => edit(input, &|list| {
            let at = at % list.len();
            list[at].state = ShardState::Closed;
            let parent = list[at].id.clone();
            for child in ["a", "b"] {
                let mut shard = shard(&format!("{parent}-{child}"));
                shard.parents = vec![parent.clone()];
                list.push(shard);
            }
        }),
        Step::Complete(at) => edit(input, &|list| {
            let at = at % list.len();
            list[at].state = ShardState::Complete;
        }),
        Step::CompleteInPlace(at) => {
            let list = Arc::make_mut(&mut input.shards);
            let at = at % list.len();
            list[at].state = ShardState::Complete;
        }
        Step::Reread => edit(input, &|_| {}),
        Step::Rename => input.options.consumer_name.push('x'),
        Step::Rebalance => {
            input.options.balance = match input.options.balance {
                Balance::Count => Balance::HashRange,
                _ => Balance::Count,
            };
        }
        Step::Standbys => input.options.standbys = 1 - input.options.standbys.min(1),
        Step::FewPods => input.pods.truncate(7),
        Step::ManyPods => {
            for _ in input.pods.len()..POOL {
                *joined += 1;
                input.pods.push(pod(&format!("joined-{joined}")));
            }
        }
        Step::FewShards => edit(input, &|list| list.truncate(40)),
        Step::ManyShards => edit(input, &|list| {
            let mut more = ranged_shards(SHARDS);
            for shard in &mut more {
                shard.id.push_str("-more");
            }
            list.extend(more);
        }),
        Step::Duplicate => edit(input, &|list| {
            let copy = list[0].clone();
            list.push(copy);
        }),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Plans with one kept memory over a random sequence of changes equal
    /// plans without memory, step by step.
    #[test]
    fn a_kept_memory_never_changes_an_output(
        steps in prop::collection::vec(arb_step(), 1..12),
        hash_range in any::<bool>(),
    ) {
        let mut input = input(ranged_shards(SHARDS), pods(POOL));
        if hash_range {
            input.options.balance = Balance::HashRange;
        }
        let mut memory = EngineMemory::default();
        let mut joined = 0;
        // A first plan fills the memory.
        let mut steps = steps;
        steps.insert(0, Step::Same);
        for (n, step) in steps.iter().enumerate() {
            apply(&mut input, step, &mut joined);
            let kept = plan_with(&input, &mut memory);
            let fresh = plan(&input);
            prop_assert_eq!(&kept, &fresh, "step {} {:?}", n, step);
            // The memory gives the same plan again (the no-op plan).
            prop_assert_eq!(&plan_with(&input, &mut memory), &fresh, "step {} again", n);
            match fresh {
                Ok(out) => {
                    input.previous = out
                        .assignment
                        .iter()
                        .filter_map(|(id, a)| Some((id.clone(), Previous::Owner(a.owner.clone()?))))
                        .collect::<BTreeMap<_, _>>()
                        .into();
                }
                Err(_) => {
                    // A duplicate id: taken out again, else every later
                    // step would be refused too.
                    let mut list = (*input.shards).clone();
                    list.sort_by(|a, b| a.id.cmp(&b.id));
                    list.dedup_by(|a, b| a.id == b.id);
                    input.shards = Arc::new(list);
                }
            }
        }
    }
}
