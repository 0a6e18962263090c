//! The repair: when a pod is outside its band, move shards until every pod
//! is within its target (see [`super::fair`]), making as few moves as it
//! can find.
//!
//! Greedy, one move at a time: take the pod furthest beyond its target (by
//! more than [`SETTLE_SIGMAS`] standard errors of its load: a pod a repair
//! settled is never taken again for noise alone). If it is over, consider
//! moving each of its shards to each of the pods with the most room; if it
//! is under, moving each shard of the pods most over their share to it.
//! Take the move that brings the most load back within that pod's target
//! (the most load shed per moved shard) net of what it pushes the other pod
//! beyond its own — counted as if the other pod's load read that many
//! standard errors worse, so noise never makes a move look free — ties to
//! the move that leaves both pods nearest their fair share. When no single
//! move helps, try swapping a shard with one of another pod (two moves), and
//! then a shard for two of another pod's, either way (three moves: a pod
//! holding two heavy shards, each too heavy to move alone and too light to
//! trade for one, or a pod short of its share by less than any shard and
//! holding the heaviest shards, is fixed no other way). When none of those
//! helps either, a move that settles the pod but pushes the pod at its
//! other end out, followed by the move or swap that then settles that one
//! ([`chained`]: a pod short of its share by less than any shard a
//! neighbour can spare). A pod nothing helps is skipped until some other
//! move changes the picture.
//! A change is kept only if the load beyond the targets over all pods,
//! measured again after it (moving a pod's heaviest shard moves the fair
//! shares), drops; so the loop ends, at a placement a re-plan leaves as it
//! is. It also ends when the optional-move budget is spent.
//!
//! In a pool, a pod still beyond its target at the end may hold only this
//! group's shards, none movable without pushing another pod as far out:
//! the others have nothing on it to move, so it would stay outside for
//! good. Its excess is then handed to a pod the pool's other groups can
//! settle with one move of theirs (see [`super::hand_over`]).
//!
//! A shard placed in this plan (new or orphaned) moves for free; moving a
//! shard back to its previous owner gives a move back.

use super::Placement;
use super::fair::{Gauge, SETTLE_SIGMAS};
use crate::model::NONE;

/// Pods considered as the other end of a move.
const PARTNERS: usize = 8;
/// A pod's heaviest shards considered for a swap.
const SWAP_SHARDS: usize = 64;
/// A pod's heaviest shards whose pairs are considered for a shard.
const PAIR_SHARDS: usize = 16;

/// The kinds of change, tried in this order while none helps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One shard to another pod.
    Move,
    /// Two shards trade places.
    Swap,
    /// A shard for two of the other pod's: the pod that gives load gives
    /// one shard, or two.
    ForTwo,
}

/// One candidate change: a move (one shard goes, `back` empty), a swap (one
/// each way) or a shard for two (one and two). `from` gives load, net.
#[derive(Debug, Clone, Copy)]
pub(super) struct Change {
    /// The shards that go from `from` to `to` (the first is always set).
    pub(super) going: [Option<u32>; 2],
    pub(super) from: u32,
    pub(super) to: u32,
    /// The shards that come back from `to` to `from`.
    pub(super) back: [Option<u32>; 2],
    /// Load brought within the targets.
    pub(super) gain: f64,
    /// How far the worse of the two pods ends from its fair share,
    /// relative to it (lower is better).
    pub(super) offset: f64,
    /// Moves it costs against the budget.
    pub(super) cost: i64,
}

impl Change {
    /// Whether `self` is a better choice than `other`.
    pub(super) fn beats(&self, other: &Change) -> bool {
        self.gain
            .total_cmp(&other.gain)
            .then(other.offset.total_cmp(&self.offset))
            .then(other.going.cmp(&self.going))
            .is_gt()
    }
}

/// Repairs `placement` toward its targets with at most `budget` optional
/// moves.
pub(crate) fn run(placement: &mut Placement<'_, '_>, band: f64, budget: u64) {
    let pods = placement.model.pods.len();
    let total: f64 = placement.load.iter().sum();
    let epsilon = 1e-9 * (total + 1.0);
    let mut used: i64 = 0;
    let budget = i64::try_from(budget).unwrap_or(i64::MAX);
    let mut stuck = vec![false; pods];
    let limit = 2 * placement.model.shards.len() + pods;
    for _ in 0..limit {
        let gauge = Gauge::new(placement, band);
        // Only a pod beyond its target by more than its noise explains
        // (or pushed there by a shift).
        let Some(x) = gauge.worst(placement, epsilon, &stuck) else {
            break;
        };
        let left = budget - used;
        let change = [Kind::Move, Kind::Swap, Kind::ForTwo]
            .into_iter()
            .find_map(|kind| best_change(placement, &gauge, x, left, epsilon, kind));
        let made = match change {
            Some(change) if lowers_the_excess(placement, &gauge, band, &change, epsilon) => {
                Some(change.cost)
            }
            _ => chained(placement, &gauge, x, left, band, epsilon),
        };
        match made {
            Some(cost) => {
                used += cost;
                stuck.fill(false);
            }
            None => stuck[x] = true,
        }
        if used >= budget {
            return;
        }
    }
    // What this group's own changes leave outside, the pool's others may
    // settle once the pod's excess is on a pod where they hold shards.
    super::hand_over::run(placement, band, budget - used, epsilon);
}

/// The excess of `placement` over every pod's target: what the repair
/// lowers with every change it keeps.
fn excess(placement: &Placement<'_, '_>, gauge: &Gauge) -> f64 {
    (0..placement.load.len())
        .map(|e| gauge.violation(e, placement.load[e]))
        .sum()
}

/// When no change of its own helps pod `x`, a move that settles it but
/// pushes the pod at its other end beyond that pod's target, followed by
/// the move or swap that then settles that pod: kept (both made) only when
/// the two together lower the excess. A pod short of its share by less than
/// any shard a neighbour can spare is filled no other way: the neighbour
/// that gives it one is left short itself, and trades a shard for a
/// heavier one with a third pod. Tried with the [`FIRST_MOVES`] moves that
/// bring `x` nearest its target. Returns the moves it cost.
fn chained(
    placement: &mut Placement<'_, '_>,
    gauge: &Gauge,
    x: usize,
    left: i64,
    band: f64,
    epsilon: f64,
) -> Option<i64> {
    let was = excess(placement, gauge);
    for first in first_moves(placement, gauge, x, left, epsilon) {
        make(placement, &first, first.from, first.to);
        let pushed = if first.from as usize == x {
            first.to
        } else {
            first.from
        } as usize;
        let between = Gauge::new(placement, band);
        let left = left - first.cost;
        for kind in [Kind::Move, Kind::Swap] {
            let Some(second) = best_change(placement, &between, pushed, left, epsilon, kind) else {
                continue;
            };
            make(placement, &second, second.from, second.to);
            if excess(placement, &Gauge::new(placement, band)) < was - epsilon {
                return Some(first.cost + second.cost);
            }
            make(placement, &second, second.to, second.from);
        }
        make(placement, &first, first.to, first.from);
    }
    None
}

/// First moves tried by [`chained`].
const FIRST_MOVES: usize = 4;

/// The single moves (of a shard of `x`'s when it is over, to it when it is
/// under) that bring pod `x` nearest its target, whatever they do to the
/// pod at the other end: at most [`FIRST_MOVES`], best first.
fn first_moves(
    placement: &Placement<'_, '_>,
    gauge: &Gauge,
    x: usize,
    left: i64,
    epsilon: f64,
) -> Vec<Change> {
    let over = placement.load[x] > gauge.fair[x];
    let mut moves: Vec<Change> = Vec::new();
    for other in partners(placement, gauge, x, over) {
        let (from, to) = if over {
            (crate::model::index(x), other)
        } else {
            (other, crate::model::index(x))
        };
        if !placement.has_room(to) {
            continue;
        }
        for &s in &placement.members[from as usize] {
            let cost = cost(placement, s, to);
            let delta = placement.weight(s);
            if cost > left || delta <= 0.0 {
                continue;
            }
            let after = if over {
                placement.load[x] - delta
            } else {
                placement.load[x] + delta
            };
            let gain = gauge.violation(x, placement.load[x]) - gauge.violation(x, after);
            // Settles `x` (or brings it nearer): the pod pushed is the
            // second move's.
            if gain <= epsilon {
                continue;
            }
            moves.push(Change {
                going: [Some(s), None],
                from,
                to,
                back: [None, None],
                gain,
                offset: (after - gauge.fair[x]).abs(),
                cost,
            });
        }
    }
    moves.sort_by(|a, b| {
        b.gain
            .total_cmp(&a.gain)
            .then(a.offset.total_cmp(&b.offset))
            .then(a.going.cmp(&b.going))
    });
    moves.truncate(FIRST_MOVES);
    moves
}

/// Moves `change`'s going shards to `to` and its shards given back to
/// `from`: makes it with (`change.from`, `change.to`), undoes it with the
/// two swapped.
pub(super) fn make(placement: &mut Placement<'_, '_>, change: &Change, from: u32, to: u32) {
    for &going in change.going.iter().flatten() {
        placement.move_to(going, to);
    }
    for &back in change.back.iter().flatten() {
        placement.move_to(back, from);
    }
}

/// Makes `change` and keeps it only if the load beyond the targets, summed
/// over every pod and measured again after it, drops by more than
/// `epsilon`; otherwise undoes it. A change that moves a pod's heaviest
/// shard moves the fair shares too (see [`super::fair`]), so its worth,
/// judged against the shares before it, can be a loss: two such swaps
/// undid each other forever, and where the loop's limit cut the cycle
/// decided the plan, so a re-plan of it moved shards again.
fn lowers_the_excess(
    placement: &mut Placement<'_, '_>,
    before: &Gauge,
    band: f64,
    change: &Change,
    epsilon: f64,
) -> bool {
    let was = excess(placement, before);
    make(placement, change, change.from, change.to);
    let after = Gauge::new(placement, band);
    if excess(placement, &after) < was - epsilon {
        return true;
    }
    make(placement, change, change.to, change.from);
    false
}

/// What moving shard `s` from its owner to `to` costs: a move when it
/// leaves its previous owner, a move given back when it returns to it.
pub(super) fn cost(placement: &Placement<'_, '_>, s: u32, to: u32) -> i64 {
    let previous = placement.model.shards[s as usize].prev_owner;
    if previous == NONE {
        0
    } else if placement.owner[s as usize] == previous {
        1
    } else if to == previous {
        -1
    } else {
        0
    }
}

/// The pods with the most room (for an over pod's shards), or the most
/// over their share (to feed an under pod), excluding `x`.
fn partners(placement: &Placement<'_, '_>, gauge: &Gauge, x: usize, over: bool) -> Vec<u32> {
    let mut others: Vec<(f64, u32)> = (0..placement.load.len())
        .filter(|&e| e != x)
        .map(|e| {
            let key = if over {
                gauge.room(e, placement.load[e])
            } else {
                placement.load[e] - gauge.fair[e]
            };
            (key, crate::model::index(e))
        })
        .collect();
    others.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    others.truncate(PARTNERS);
    others.into_iter().map(|(_, e)| e).collect()
}

/// What shifting `delta` load between pod `x` (giving it when `x_gives`,
/// else taking it) and pod `other` is worth: the load it brings back within
/// `x`'s target, minus what it pushes `other` beyond its own, counted as if
/// `other`'s measured load were [`SETTLE_SIGMAS`] standard errors worse than
/// it reads (so noise never makes a move look free); and how far the worse
/// of the two pods ends from its fair share, relative to it.
pub(super) fn worth(
    placement: &Placement<'_, '_>,
    gauge: &Gauge,
    x: usize,
    other: usize,
    x_gives: bool,
    delta: f64,
) -> (f64, f64) {
    let (lx, lo) = (placement.load[x], placement.load[other]);
    let (lx2, lo2) = if x_gives {
        (lx - delta, lo + delta)
    } else {
        (lx + delta, lo - delta)
    };
    let lean = SETTLE_SIGMAS * gauge.sigma[other] * if x_gives { 1.0 } else { -1.0 };
    let gained = gauge.violation(x, lx) - gauge.violation(x, lx2);
    let lost = gauge.violation(other, lo2 + lean) - gauge.violation(other, lo + lean);
    let offset = |e: usize, load: f64| {
        if gauge.fair[e] > 0.0 {
            (load - gauge.fair[e]).abs() / gauge.fair[e]
        } else {
            load
        }
    };
    (
        gained - lost,
        offset(x, lx2).powi(2) + offset(other, lo2).powi(2),
    )
}

/// The search for the best change that helps pod `x`.
struct Search<'p, 'm, 'a> {
    placement: &'p Placement<'m, 'a>,
    gauge: &'p Gauge,
    x: usize,
    /// Whether `x` is over its share (it gives) or under (it takes).
    over: bool,
    /// Moves left in the budget.
    left: i64,
    epsilon: f64,
    best: Option<Change>,
}

impl Search<'_, '_, '_> {
    /// Considers moving `going` from `from` to `to` (`other` is whichever
    /// of the two is not `x`), and `back` the other way.
    fn consider(
        &mut self,
        from: u32,
        to: u32,
        other: u32,
        going: [Option<u32>; 2],
        back: [Option<u32>; 2],
    ) {
        let p = self.placement;
        let weight =
            |list: &[Option<u32>; 2]| list.iter().flatten().map(|&s| p.weight(s)).sum::<f64>();
        let delta = weight(&going) - weight(&back);
        if delta <= 0.0 {
            return;
        }
        let cost = going.iter().flatten().map(|&s| cost(p, s, to)).sum::<i64>()
            + back
                .iter()
                .flatten()
                .map(|&t| cost(p, t, from))
                .sum::<i64>();
        if cost > self.left {
            return;
        }
        let (gain, offset) = worth(p, self.gauge, self.x, other as usize, self.over, delta);
        if gain <= self.epsilon {
            return;
        }
        let change = Change {
            going,
            from,
            to,
            back,
            gain,
            offset,
            cost,
        };
        if self.best.as_ref().is_none_or(|b| change.beats(b)) {
            self.best = Some(change);
        }
    }
}

/// The best change of `kind` that helps pod `x`, if any is worth it: a
/// single move, two shards trading places (each pod's [`SWAP_SHARDS`]
/// heaviest), or a shard for two (pairs of the receiving pod's
/// [`PAIR_SHARDS`] heaviest).
fn best_change(
    placement: &Placement<'_, '_>,
    gauge: &Gauge,
    x: usize,
    left: i64,
    epsilon: f64,
    kind: Kind,
) -> Option<Change> {
    let over = placement.load[x] > gauge.fair[x];
    let heaviest = |e: u32, count: usize| {
        let mut list = placement.members[e as usize].clone();
        list.sort_by(|&a, &b| {
            placement
                .weight(b)
                .total_cmp(&placement.weight(a))
                .then(a.cmp(&b))
        });
        list.truncate(count);
        list
    };
    let mut search = Search {
        placement,
        gauge,
        x,
        over,
        left,
        epsilon,
        best: None,
    };
    for other in partners(placement, gauge, x, over) {
        let (from, to) = if over {
            (crate::model::index(x), other)
        } else {
            (other, crate::model::index(x))
        };
        match kind {
            Kind::Move if placement.has_room(to) => {
                for &s in &placement.members[from as usize] {
                    search.consider(from, to, other, [Some(s), None], [None, None]);
                }
            }
            Kind::Move => {}
            Kind::Swap => {
                let (going, coming) = (heaviest(from, SWAP_SHARDS), heaviest(to, SWAP_SHARDS));
                for &s in &going {
                    for &t in &coming {
                        search.consider(from, to, other, [Some(s), None], [Some(t), None]);
                    }
                }
            }
            Kind::ForTwo => {
                // One going for two back: `from` ends with a shard more.
                if placement.has_room(from) {
                    let (ones, pairs) = (heaviest(from, SWAP_SHARDS), heaviest(to, PAIR_SHARDS));
                    for &s in &ones {
                        for (t, u) in pairs_of(&pairs) {
                            search.consider(from, to, other, [Some(s), None], [Some(t), Some(u)]);
                        }
                    }
                }
                // Two going for one back: `to` ends with a shard more.
                if placement.has_room(to) {
                    let (pairs, ones) = (heaviest(from, PAIR_SHARDS), heaviest(to, SWAP_SHARDS));
                    for (s, u) in pairs_of(&pairs) {
                        for &t in &ones {
                            search.consider(from, to, other, [Some(s), Some(u)], [Some(t), None]);
                        }
                    }
                }
            }
        }
    }
    search.best
}

/// Every pair of two different shards of `list`.
fn pairs_of(list: &[u32]) -> impl Iterator<Item = (u32, u32)> + '_ {
    list.iter()
        .enumerate()
        .flat_map(move |(i, &a)| list[i + 1..].iter().map(move |&b| (a, b)))
}
