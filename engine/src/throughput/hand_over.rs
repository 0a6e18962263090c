//! The hand-over, the last step of a pool group's repair: pods outside
//! their band that nothing of this group's own can settle are settled
//! together with the pool's other groups.
//!
//! A pod holding only this group's heavy shards, each too heavy to move or
//! trade without pushing another pod as far out, stays outside for good
//! otherwise: no change of this group's lowers the excess, and the others
//! have nothing on it to move. So one of its shards goes to a pod where the
//! others hold shards:
//!
//! - **Plain:** it trades places with a lighter one of this group's there
//!   (or moves there), so that the pod ends inside its target, and the
//!   other pod ends beyond its own by no more than the heaviest shard the
//!   others put on it: a move of theirs can settle it. The least excess
//!   left on the other pod wins.
//! - **Through the peers,** when no plain hand-over exists: it moves to a
//!   pod where one of the others' shards ([`crate::PodLoad::shards`]) is
//!   lighter by just enough that the two pods, once that shard came back
//!   the other way, would both be inside their targets. The pod it leaves
//!   may read under its band meanwhile; the others' next plans see one pod
//!   over and one under and the move that settles both. This is a trade
//!   between two groups that neither could make alone (a pool simulation
//!   found two pods of one group's shards stuck 13% over while the other
//!   group's pods sat 8% under).
//!
//! - **Filling through the peers:** a pod under its band that holds only
//!   the others' shards, each too heavy for their groups to trade, takes a
//!   shard of this group's from a pod where one of the others' shards on
//!   it could go in return, both pods then inside their targets.
//!
//! Each pod stuck outside is handed over once per plan, each to a pod of
//! its own: the next plans (the peers', woken by the moves) settle them,
//! and a second stuck pod does not wait a damping interval for its turn.

use super::Placement;
use super::fair::{Gauge, SETTLE_SIGMAS};
use super::repair::{Change, cost, make, worth};

/// One hand-over: the change this group makes, and the load the pool's
/// other groups are counted on to bring back from `change.to` to
/// `change.from` (0 for a plain hand-over).
struct HandOver {
    change: Change,
    returned: f64,
}

impl HandOver {
    /// Pod `x`'s load once the peers brought back what they are counted
    /// on for, from `load` (its load after this group's change).
    fn settled(&self, x: usize, load: f64) -> f64 {
        if self.change.from as usize == x {
            load + self.returned
        } else {
            load - self.returned
        }
    }
}

/// Hands over the pods still beyond their target, the worst first, with
/// at most `left` optional moves.
pub(super) fn run(placement: &mut Placement<'_, '_>, band: f64, mut left: i64, epsilon: f64) {
    if placement.model.pool_load.is_empty() {
        return;
    }
    let pods = placement.load.len();
    // Pods handed over, or taking a hand-over: each is in one at most.
    let mut involved = vec![false; pods];
    while left > 0 {
        let gauge = Gauge::new(placement, band);
        let Some(x) = gauge.worst(placement, epsilon, &involved) else {
            return;
        };
        involved[x] = true;
        let Some(hand) = best(placement, &gauge, x, left, &involved) else {
            continue;
        };
        let change = &hand.change;
        make(placement, change, change.from, change.to);
        // Moving a pod's heaviest shard moves the fair shares: kept only
        // if the pod is inside its target by them too (once what the peers
        // bring back is back).
        let after = Gauge::new(placement, band);
        let settled = hand.settled(x, placement.load[x]);
        if after.violation(x, settled) > epsilon.max(after.slack(x)) {
            make(placement, change, change.to, change.from);
            continue;
        }
        involved[change.from as usize] = true;
        involved[change.to as usize] = true;
        left -= change.cost;
    }
}

/// The best hand-over of pod `x` with a pod not yet `involved`: over its
/// share, a plain one if any, else one through the peers; under it, one
/// through the peers.
fn best(
    placement: &Placement<'_, '_>,
    gauge: &Gauge,
    x: usize,
    left: i64,
    involved: &[bool],
) -> Option<HandOver> {
    if placement.load[x] <= gauge.fair[x] {
        return best_to_fill(placement, gauge, x, left, involved);
    }
    let mut plain: Option<Change> = None;
    let mut traded: Option<HandOver> = None;
    for (o, &taken) in involved.iter().enumerate() {
        if o == x || taken || placement.pool_heaviest[o] <= 0.0 {
            continue;
        }
        if let Some(change) = plain_to(placement, gauge, x, o, left)
            && plain.as_ref().is_none_or(|b| change.beats(b))
        {
            plain = Some(change);
        }
        if plain.is_none()
            && let Some(hand) = through_peers(placement, gauge, x, o, true, left)
            && traded.as_ref().is_none_or(|b| hand.change.beats(&b.change))
        {
            traded = Some(hand);
        }
    }
    plain
        .map(|change| HandOver {
            change,
            returned: 0.0,
        })
        .or(traded)
}

/// The best hand-over that fills pod `x` (under its share, holding shards
/// of the pool's others) through the peers, from a pod not yet
/// `involved` (see [`through_peers`]). A pod holding only the others'
/// shards, each too heavy to trade within their groups, is otherwise left
/// short for good (pool throughput simulation seeds 60002942 and
/// 60005293: 15–18% under).
fn best_to_fill(
    placement: &Placement<'_, '_>,
    gauge: &Gauge,
    x: usize,
    left: i64,
    involved: &[bool],
) -> Option<HandOver> {
    let mut best: Option<HandOver> = None;
    for (o, &taken) in involved.iter().enumerate() {
        if o == x || taken {
            continue;
        }
        if let Some(hand) = through_peers(placement, gauge, x, o, false, left)
            && best.as_ref().is_none_or(|b| hand.change.beats(&b.change))
        {
            best = Some(hand);
        }
    }
    best
}

/// The best plain hand-over of pod `x` to pod `o`: a shard of `x` moves
/// there, or trades places with a lighter one of this group's, `x` ends
/// inside its target and `o` beyond its own by no more than the heaviest
/// shard the pool's others put on it. The less excess left for the
/// peers, the better.
fn plain_to(
    placement: &Placement<'_, '_>,
    gauge: &Gauge,
    x: usize,
    o: usize,
    left: i64,
) -> Option<Change> {
    let (from, to) = (crate::model::index(x), crate::model::index(o));
    let mut backs: Vec<Option<u32>> = placement.members[o].iter().map(|&t| Some(t)).collect();
    backs.push(None);
    let mut best: Option<Change> = None;
    for &s in &placement.members[x] {
        for &t in &backs {
            if t.is_none() && !placement.has_room(to) {
                continue;
            }
            let delta = placement.weight(s) - t.map_or(0.0, |t| placement.weight(t));
            if delta <= 0.0 {
                continue;
            }
            let cost = cost(placement, s, to) + t.map_or(0, |t| cost(placement, t, from));
            if cost > left || gauge.violation(x, placement.load[x] - delta) > 0.0 {
                continue;
            }
            let lean = SETTLE_SIGMAS * gauge.sigma[o];
            let pushed = gauge.violation(o, placement.load[o] + delta + lean);
            if pushed > placement.pool_heaviest[o] {
                continue;
            }
            let (_, offset) = worth(placement, gauge, x, o, true, delta);
            let change = Change {
                going: [Some(s), None],
                from,
                to,
                back: [t, None],
                gain: -pushed,
                offset,
                cost,
            };
            if best.as_ref().is_none_or(|b| change.beats(b)) {
                best = Some(change);
            }
        }
    }
    best
}

/// The best trade of pod `x` with pod `o` through the peers: a shard of
/// this group's moves from the pod that gives load (`x` when `x_gives`,
/// else `o`) to the other, where one of the pool's others' shards, lighter
/// by just enough, would, moved back the other way, leave both pods
/// inside their targets (`o` judged as if its load read [`SETTLE_SIGMAS`]
/// standard errors further out). Ties go to the trade that leaves both
/// pods nearest their fair share.
fn through_peers(
    placement: &Placement<'_, '_>,
    gauge: &Gauge,
    x: usize,
    o: usize,
    x_gives: bool,
    left: i64,
) -> Option<HandOver> {
    let (giver, taker) = if x_gives { (x, o) } else { (o, x) };
    let (from, to) = (crate::model::index(giver), crate::model::index(taker));
    if !placement.has_room(to) {
        return None;
    }
    // Load `x` gives, net, for each unit the trade shifts.
    let sign = if x_gives { 1.0 } else { -1.0 };
    let lean = SETTLE_SIGMAS * gauge.sigma[o];
    let mut best: Option<HandOver> = None;
    for &s in &placement.members[giver] {
        let cost = cost(placement, s, to);
        if cost > left {
            continue;
        }
        for &peer in &placement.model.pool_load[taker].shards {
            let returned = peer as f64;
            let delta = placement.weight(s) - returned;
            if delta <= 0.0
                || gauge.violation(x, placement.load[x] - sign * delta) > 0.0
                || gauge.violation(o, placement.load[o] + sign * (delta + lean)) > 0.0
            {
                continue;
            }
            let (_, offset) = worth(placement, gauge, x, o, x_gives, delta);
            let change = Change {
                going: [Some(s), None],
                from,
                to,
                back: [None, None],
                gain: 0.0,
                offset,
                cost,
            };
            if best.as_ref().is_none_or(|b| change.beats(&b.change)) {
                best = Some(HandOver { change, returned });
            }
        }
    }
    best
}
