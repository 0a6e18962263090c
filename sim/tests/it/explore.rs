//! Exhaustive check of the handoff protocol on two pods and two shards:
//! every interleaving of the real plan step, both consumers, reordered and
//! lost API writes, lagging lease releases, one operator restart, a joining
//! pod, a graceful deletion or a SIGKILL, within a bounded clock.

use shardring_sim::explore::{Bounds, explore};

#[test]
fn no_reachable_state_has_two_readers() {
    let result = explore(Bounds {
        ticks: 5,
        in_flight: 3,
        max_states: 150_000,
    });
    println!(
        "explored {} states, {} transitions, truncated: {}",
        result.states, result.transitions, result.truncated
    );
    assert_eq!(result.violation, None);
    assert!(result.states > 1_000, "the search went somewhere");
}
