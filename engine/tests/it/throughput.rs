//! Throughput balance: Zipf-skewed loads land within the band, noise inside
//! the band moves nothing, a doubled shard comes back with the fewest moves,
//! unmeasured shards balance counts, and the options (band, budget,
//! requiredOnly, cap) hold.

use std::sync::Arc;

use proptest::prelude::*;
use shardring_engine::hash::mix;
use shardring_engine::{Balance, PlanError, PlanInput, PlanOutput, Previous, Rebalance, ShardLoad};

use crate::common::*;
use crate::props::{apply_previous, arb_pods, arb_previous, check_consistent, shuffle};

/// Zipf(`s`) loads over `n` shards (the k-th heaviest weighs ∝ 1/k^s),
/// dealt to the shards in a scrambled order, `total` bytes/s in all.
pub(crate) fn zipf(n: usize, s: f64, total: f64) -> Vec<u64> {
    let raw: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let sum: f64 = raw.iter().sum();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| mix(i as u64 + 1));
    let mut out = vec![0; n];
    for (rank, &at) in order.iter().enumerate() {
        out[at] = whole(raw[rank] / sum * total);
    }
    out
}

/// A non-negative rate rounded to whole bytes per second.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // the rates here are positive and far below u64::MAX
fn whole(rate: f64) -> u64 {
    rate.round() as u64
}

/// `input` in throughput mode with `rates`, each with a standard error of
/// `noise` × its rate.
fn with_loads(mut input: PlanInput, rates: &[f64], noise: f64) -> PlanInput {
    input.options.balance = Balance::Throughput;
    input.loads = input
        .shards
        .iter()
        .zip(rates)
        .map(|(shard, &rate)| {
            (
                shard.id.clone(),
                ShardLoad {
                    rate: whole(rate),
                    noise: whole(rate * noise),
                    shift: 0,
                },
            )
        })
        .collect();
    input
}

fn report(out: &PlanOutput) -> &shardring_engine::ThroughputReport {
    out.throughput.as_ref().expect("a throughput report")
}

/// Fewest and most load ÷ fair share over the pods.
fn spread_of(out: &PlanOutput) -> (f64, f64) {
    let (min, max) = report(out).spread_permille().expect("pods");
    (min as f64 / 1000.0, max as f64 / 1000.0)
}

/// A deterministic factor in [1 − amplitude, 1 + amplitude].
fn jitter(seed: u64, amplitude: f64) -> f64 {
    let unit = (mix(seed) >> 11) as f64 / (1u64 << 53) as f64;
    1.0 + amplitude * (2.0 * unit - 1.0)
}

/// The smoothed estimates' standard error, relative: readings with ±5 %
/// uniform noise (σ = 5 % / √3) through an EMA with α = 0.2.
const SMOOTHED_NOISE: f64 = 0.0289 * 0.333;

/// The fewest moves that can bring every pod back inside the band: a pod
/// over it must give at least the fewest of its shards that cover its
/// excess (its heaviest first, but never the shard its fair share is made
/// of), a pod under it must take at least one, and one move serves one of
/// each.
fn bound(input: &PlanInput) -> u64 {
    let held = run(&with_rebalance(input.clone(), Rebalance::RequiredOnly));
    let band = f64::from(input.options.band_percent.unwrap_or(10)) / 100.0;
    let mut on: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for (id, a) in held.assignment.iter() {
        if let (Some(owner), Some(load)) = (&a.owner, input.loads.get(id)) {
            on.entry(owner).or_default().push(load.rate);
        }
    }
    let (mut give, mut under) = (0, 0);
    for (name, pod) in &report(&held).pods {
        let upper = pod.fair as f64 * (1.0 + band);
        if pod.load as f64 > upper {
            let mut excess = pod.load as f64 - upper;
            let mut rates = on.get(name.as_str()).cloned().unwrap_or_default();
            rates.sort_unstable_by(|a, b| b.cmp(a));
            // A pod whose fair share is its heaviest shard keeps that one.
            let dedicated = rates.first().is_some_and(|&r| r >= pod.fair);
            for rate in rates.into_iter().skip(usize::from(dedicated)) {
                if excess <= 0.0 {
                    break;
                }
                excess -= rate as f64;
                give += 1;
            }
        } else if (pod.load as f64) < pod.fair as f64 * (1.0 - band) {
            under += 1;
        }
    }
    give.max(under)
}

/// Zipf(1.1) over `n` shards and `p` pods, settled from count balance.
fn settled(n: usize, p: usize) -> (Vec<f64>, PlanOutput) {
    let rates: Vec<f64> = zipf(n, 1.1, 1e8).into_iter().map(|r| r as f64).collect();
    let count = run(&input(shards(n), pods(p)));
    let mut inp = with_loads(input(shards(n), pods(p)), &rates, SMOOTHED_NOISE);
    inp.previous = previous_of(&count);
    let out = run(&inp);
    (rates, out)
}

#[test]
fn zipf_loads_land_within_the_band() {
    for (n, p) in [(1000, 50), (64, 10)] {
        let rates: Vec<f64> = zipf(n, 1.1, 1e8).into_iter().map(|r| r as f64).collect();
        let fresh = run(&with_loads(input(shards(n), pods(p)), &rates, 0.0));
        let (min, max) = spread_of(&fresh);
        assert!(min >= 0.9 && max <= 1.1, "{n} x {p} fresh: {min}..{max}");
        assert_eq!(report(&fresh).still_out_of_band, 0);

        // From count balance, one plan brings every pod inside the band...
        let (rates, out) = settled(n, p);
        let (min, max) = spread_of(&out);
        assert!(
            min >= 0.9 && max <= 1.1,
            "{n} x {p} from count: {min}..{max}"
        );
        assert!(report(&out).out_of_band > 0 && out.optional_moves() > 0);
        assert_eq!(report(&out).still_out_of_band, 0);
        // ...and planning again moves nothing.
        let mut again = with_loads(input(shards(n), pods(p)), &rates, SMOOTHED_NOISE);
        again.previous = previous_of(&out);
        assert_eq!(run(&again).moves, 0, "{n} x {p}");
    }
}

#[test]
fn noise_inside_the_band_never_moves_a_shard() {
    for (n, p) in [(1000, 50), (64, 10)] {
        let (rates, out) = settled(n, p);
        let mut previous = previous_of(&out);
        let mut smoothed = rates.clone();
        for round in 0..500u64 {
            for (i, &rate) in rates.iter().enumerate() {
                let reading = rate * jitter(round * 100_003 + i as u64, 0.05);
                smoothed[i] += 0.2 * (reading - smoothed[i]);
            }
            let mut inp = with_loads(input(shards(n), pods(p)), &smoothed, SMOOTHED_NOISE);
            inp.previous = previous;
            let out = run(&inp);
            assert_eq!(out.moves, 0, "{n} x {p}, round {round}");
            previous = previous_of(&out);
        }
    }
}

#[test]
fn a_doubled_shard_comes_back_with_the_fewest_moves() {
    for (n, p) in [(64, 10), (1000, 50)] {
        let (rates, settled) = settled(n, p);
        let mut order: Vec<usize> = (0..rates.len()).collect();
        order.sort_by(|&a, &b| rates[b].total_cmp(&rates[a]));
        let (mut repaired, mut moves, mut bounds) = (0, 0, 0);
        for &i in order.iter().take(16) {
            let mut shifted = rates.clone();
            shifted[i] *= 2.0;
            let mut inp = with_loads(input(shards(n), pods(p)), &shifted, SMOOTHED_NOISE);
            inp.previous = previous_of(&settled);
            let out = run(&inp);
            if report(&out).out_of_band == 0 {
                assert_eq!(
                    out.moves, 0,
                    "{n} x {p}, shard {i}: inside the band, nothing moves"
                );
                continue;
            }
            repaired += 1;
            assert_eq!(report(&out).still_out_of_band, 0, "{n} x {p}, shard {i}");
            let bound = bound(&inp);
            assert!(
                out.moves >= bound,
                "{n} x {p}, shard {i}: below the lower bound?"
            );
            assert!(
                out.moves <= bound + 2,
                "{n} x {p}, shard {i}: {} moves, lower bound {bound}",
                out.moves
            );
            moves += out.moves;
            bounds += bound;
        }
        assert!(
            repaired >= 4,
            "{n} x {p}: only {repaired} of 16 doublings left the band"
        );
        assert!(
            moves <= bounds + repaired / 2,
            "{n} x {p}: {moves} moves, bounds {bounds}"
        );
    }
}

#[test]
fn unmeasured_shards_weigh_the_mean() {
    // Nothing measured: shard counts balance, as in count mode.
    let mut inp = input(shards(100), pods(7));
    inp.options.balance = Balance::Throughput;
    let out = run(&inp);
    assert!(spread(&out) <= 1, "{:?}", out.loads);
    // Half measured at 10, half unmeasured: the unmeasured weigh 10 too,
    // so counts still balance.
    let rates = vec![10.0; 50];
    let mut half = with_loads(input(shards(100), pods(7)), &rates, 0.0);
    half.loads = half.loads.into_iter().take(50).collect();
    let out = run(&half);
    assert!(spread(&out) <= 1, "{:?}", out.loads);
    let (min, max) = spread_of(&out);
    assert!(min >= 0.9 && max <= 1.1, "{min}..{max}");
}

#[test]
fn a_difference_its_noise_explains_moves_nothing() {
    // Two pods, two shards each; the first pod carries 30 % more.
    let rates = [650.0, 650.0, 500.0, 500.0];
    let previous = |inp: &mut PlanInput| {
        for (i, shard) in inp.shards.iter().enumerate() {
            let owner = if i < 2 { "consumer-0" } else { "consumer-1" };
            Arc::make_mut(&mut inp.previous)
                .insert(shard.id.clone(), Previous::Owner(owner.into()));
        }
    };
    let mut exact = with_loads(input(shards(4), pods(2)), &rates, 0.0);
    previous(&mut exact);
    let out = run(&exact);
    assert_eq!(report(&out).out_of_band, 2);
    assert_eq!(out.moves, 2, "a swap");
    assert_eq!(report(&out).still_out_of_band, 0);
    // The same readings with a standard error of 5 % per shard: 15 % off
    // the fair share is within 10 % plus five standard errors of the pod.
    let mut noisy = with_loads(input(shards(4), pods(2)), &rates, 0.05);
    previous(&mut noisy);
    let out = run(&noisy);
    assert_eq!(report(&out).out_of_band, 0);
    assert_eq!(out.moves, 0);
}

#[test]
fn a_pod_a_shift_pushed_past_the_edge_is_repaired_within_the_noise_margin() {
    // Four pods of ten shards of 1,000 bytes/s, each read with a standard
    // error of 4 %; one shard of the first pod rises to 2,667: that pod is
    // at 1.12 of its fair share, past the band by less than five standard
    // errors of its load.
    let n = 40;
    let mut rates = vec![1000.0; n];
    let layout = |inp: &mut PlanInput| {
        for (i, shard) in inp.shards.iter().enumerate() {
            Arc::make_mut(&mut inp.previous).insert(
                shard.id.clone(),
                Previous::Owner(format!("consumer-{}", i / 10)),
            );
        }
    };
    rates[0] = 2667.0;
    let mut noisy = with_loads(input(shards(n), pods(4)), &rates, 0.04);
    layout(&mut noisy);
    let out = run(&noisy);
    assert_eq!(report(&out).out_of_band, 0, "inside the noise margin");
    assert_eq!(out.moves, 0);
    // The same loads, with the rise known as a shift (not noise): the pod
    // it pushed out of the band is brought back.
    let mut shifted = noisy.clone();
    shifted.loads.get_mut(&noisy.shards[0].id).unwrap().shift = 1667;
    let out = run(&shifted);
    assert_eq!(report(&out).out_of_band, 1, "{:?}", report(&out).pods);
    assert_eq!(out.moves, 1, "one shard of the pushed pod");
    assert_eq!(report(&out).still_out_of_band, 0);
    let (_, max) = spread_of(&out);
    assert!(max <= 1.1, "{max}");
    // A shift that pushed the pod toward its fair share changes nothing.
    let mut eased = noisy.clone();
    eased.loads.get_mut(&noisy.shards[0].id).unwrap().shift = -1000;
    assert_eq!(run(&eased).moves, 0);
}

#[test]
fn the_band_the_budget_and_required_only_hold() {
    let (rates, _) = settled(64, 10);
    let count = run(&input(shards(64), pods(10)));
    let mut inp = with_loads(input(shards(64), pods(10)), &rates, 0.0);
    inp.previous = previous_of(&count);
    let free = run(&inp);
    assert!(free.optional_moves() > 3, "{}", free.optional_moves());

    let held = run(&with_rebalance(inp.clone(), Rebalance::RequiredOnly));
    assert_eq!(held.moves, 0);
    assert!(report(&held).out_of_band > 0);
    assert_eq!(report(&held).still_out_of_band, report(&held).out_of_band);

    let mut budgeted = inp.clone();
    budgeted.options.max_optional_moves = Some(3);
    assert!(run(&budgeted).optional_moves() <= 3);

    // A wider band tolerates more.
    let mut wide = inp.clone();
    wide.options.band_percent = Some(50);
    assert!(run(&wide).moves < free.moves);
    for bad in [0, 101] {
        let mut bad_band = inp.clone();
        bad_band.options.band_percent = Some(bad);
        assert_eq!(
            shardring_engine::plan(&bad_band),
            Err(PlanError::BadBand(bad))
        );
    }
    // A load for an id the input does not have is refused, not dropped.
    let mut stray = inp;
    stray
        .loads
        .insert("no-such-shard".into(), stray.loads["shardId-000000000000"]);
    assert_eq!(
        shardring_engine::plan(&stray),
        Err(PlanError::UnknownLoad("no-such-shard".into()))
    );
}

/// Most load per unit of capacity over the pods of `out`.
fn most_per_capacity(inp: &PlanInput, out: &PlanOutput) -> f64 {
    let mut load: std::collections::BTreeMap<&str, f64> = Default::default();
    for (id, a) in out.assignment.iter() {
        if let Some(owner) = &a.owner {
            *load.entry(owner.as_str()).or_default() += inp.loads[id].rate as f64;
        }
    }
    inp.pods
        .iter()
        .map(|p| load.get(p.name.as_str()).copied().unwrap_or(0.0) / f64::from(p.capacity))
        .fold(0.0, f64::max)
}

/// The reference: heaviest shard first to the pod whose load per unit of
/// capacity is least once it takes it (the greedy for uniform machines).
fn greedy_per_capacity(inp: &PlanInput) -> f64 {
    let mut rates: Vec<f64> = inp.loads.values().map(|l| l.rate as f64).collect();
    rates.sort_by(|a, b| b.total_cmp(a));
    let capacity: Vec<f64> = inp.pods.iter().map(|p| f64::from(p.capacity)).collect();
    let mut load = vec![0.0; capacity.len()];
    for rate in rates {
        let best = (0..load.len())
            .min_by(|&a, &b| {
                ((load[a] + rate) / capacity[a]).total_cmp(&((load[b] + rate) / capacity[b]))
            })
            .unwrap();
        load[best] += rate;
    }
    (0..load.len())
        .map(|e| load[e] / capacity[e])
        .fold(0.0, f64::max)
}

/// Pools of capacities 1 to 4 under Zipf loads: from scratch, and from a
/// placement that put the heaviest shards on the smallest pods, the most
/// load per unit of capacity is within 10 % of the capacity-aware greedy's
/// (before: 1.44 to 4.00 from scratch, a giant on a capacity-1 pod counted
/// as inside the band because it was that pod's water-filled share).
#[test]
fn unequal_capacities_place_by_load_per_unit_of_capacity() {
    let pools: [(&[u32], usize); 4] = [
        (&[1, 2, 3, 4], 12),
        (&[1, 1, 4, 4], 20),
        (&[1, 2, 3, 4, 1, 2, 3, 4], 40),
        (&[1, 2, 3, 4], 100),
    ];
    for (capacities, n) in pools {
        let mut pool = pods(capacities.len());
        for (pod, &capacity) in pool.iter_mut().zip(capacities) {
            pod.capacity = capacity;
        }
        let rates: Vec<f64> = zipf(n, 1.1, 1e7).into_iter().map(|r| r as f64).collect();
        let fresh_input = with_loads(input(shards(n), pool.clone()), &rates, 0.0);
        let best = greedy_per_capacity(&fresh_input);
        let fresh = run(&fresh_input);
        let ratio = most_per_capacity(&fresh_input, &fresh) / best;
        assert!(
            ratio <= 1.10,
            "{capacities:?} x {n} from scratch: {ratio:.3}"
        );

        // The heaviest shards dealt to the smallest pods first.
        let mut by_weight: Vec<usize> = (0..n).collect();
        by_weight.sort_by(|&a, &b| rates[b].total_cmp(&rates[a]));
        let mut smallest_first: Vec<usize> = (0..capacities.len()).collect();
        smallest_first.sort_by_key(|&e| capacities[e]);
        let mut sticky = fresh_input.clone();
        for (k, &shard) in by_weight.iter().enumerate() {
            let pod = &pool[smallest_first[k % pool.len()]].name;
            Arc::make_mut(&mut sticky.previous).insert(
                sticky.shards[shard].id.clone(),
                Previous::Owner(pod.clone()),
            );
        }
        let repaired = run(&sticky);
        let ratio = most_per_capacity(&sticky, &repaired) / best;
        assert!(ratio <= 1.10, "{capacities:?} x {n} repaired: {ratio:.3}");
        assert_eq!(report(&repaired).still_out_of_band, 0);
        let mut again = sticky.clone();
        again.previous = previous_of(&repaired);
        assert_eq!(
            run(&again).moves,
            0,
            "{capacities:?} x {n}: a re-plan moves nothing"
        );
    }
}

/// Two cases from fresh throughput seeds of the simulation that no move
/// and no swap could repair: seed 620003636, a pod holding two heavy shards
/// (4.1 and 3.0 MB/s against a fair share of 6.3; either alone too heavy to
/// move, no single shard to trade that brings both pods inside): one of
/// them for two of another pod's; seed 388447379, a pod short of its share
/// (0.88) holding the two heaviest shards (no shard heavier to trade for):
/// one of them for two of another pod's.
#[test]
fn a_shard_for_two_repairs_what_no_move_or_swap_can() {
    let cases: [&[&[u64]]; 2] = [
        &[
            &[1059, 1037, 1011, 980, 729, 594, 401],
            &[4137, 2998],
            &[1464, 1384, 1381, 1047, 664],
            &[1472, 1365, 1340, 1046, 698, 279],
            &[1545, 1416, 1338, 1295, 586],
        ],
        &[
            &[1311, 1296],
            &[1279, 875, 567],
            &[1144, 1125, 958],
            &[654, 652, 618, 618, 527],
            &[1039, 982, 545, 508],
            &[1174, 973, 943],
        ],
    ];
    for held in cases {
        let rates: Vec<f64> = held
            .iter()
            .flat_map(|r| r.iter().map(|&k| k as f64 * 1000.0))
            .collect();
        let mut inp = with_loads(input(shards(rates.len()), pods(held.len())), &rates, 0.002);
        let owners = held
            .iter()
            .enumerate()
            .flat_map(|(p, r)| r.iter().map(move |_| p));
        for (shard, p) in inp.shards.iter().zip(owners) {
            Arc::make_mut(&mut inp.previous)
                .insert(shard.id.clone(), Previous::Owner(format!("consumer-{p}")));
        }
        let out = run(&inp);
        assert!(
            report(&out).out_of_band > 0,
            "the case starts outside the band"
        );
        assert_eq!(report(&out).still_out_of_band, 0, "{:?}", spread_of(&out));
        assert!(out.moves <= 3, "{} moves", out.moves);
        // At rest afterwards: planning the result again moves nothing.
        let mut again = inp.clone();
        again.previous = previous_of(&out);
        assert_eq!(run(&again).moves, 0);
    }
}

#[test]
fn a_pod_over_the_cap_releases_shards_as_required_moves() {
    let rates = vec![100.0; 12];
    let mut inp = with_loads(input(shards(12), pods(3)), &rates, 0.0);
    for shard in inp.shards.iter() {
        Arc::make_mut(&mut inp.previous)
            .insert(shard.id.clone(), Previous::Owner("consumer-0".into()));
    }
    inp.options.max_shards_per_pod = 5;
    let out = run(&inp);
    // Seven must go (the cap); one more leaves to bring the last pod into
    // the band: 4 shards each.
    assert_eq!(out.required_moves(), 7);
    assert_eq!(out.optional_moves(), 1);
    assert_eq!(loads(&out), vec![4, 4, 4]);
    assert!(out.unassigned.is_empty());
}

#[test]
fn golden_throughput_plan() {
    let rates: Vec<f64> = zipf(12, 1.1, 1e6).into_iter().map(|r| r as f64).collect();
    let out = run(&with_loads(input(shards(12), pods(4)), &rates, 0.01));
    let owners: Vec<&str> = out
        .assignment
        .values()
        .map(|a| {
            a.owner
                .as_deref()
                .map_or("-", |o| o.trim_start_matches("consumer-"))
        })
        .collect();
    assert_eq!(owners.join(" "), "0 3 0 3 0 2 3 0 2 1 2 2");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any loads: the output is consistent, independent of input order,
    /// within the cap, and a re-plan of it moves nothing.
    #[test]
    fn consistent_order_independent_and_stable(
        s in 1..120usize,
        pods in arb_pods(10, 3),
        prev in arb_previous(120, 10),
        loads in prop::collection::vec(prop::option::weighted(0.9, 0..1_000_000u64), 120),
        noise in 0..3u64,
        cap in 0..20u32,
        seed in any::<u64>(),
    ) {
        let mut inp = input(shards(s), pods);
        inp.options.balance = Balance::Throughput;
        inp.options.max_shards_per_pod = cap;
        apply_previous(&mut inp, &prev[..s]);
        for (shard, load) in inp.shards.iter().zip(&loads) {
            if let Some(rate) = load {
                inp.loads.insert(shard.id.clone(), ShardLoad { rate: *rate, noise: rate * noise / 100, shift: 0 });
            }
        }
        let out = run(&inp);
        check_consistent(&inp, &out);
        if cap > 0 {
            prop_assert!(out.loads.values().all(|&l| l <= u64::from(cap)));
        }
        let mut shuffled = inp.clone();
        shuffle(Arc::make_mut(&mut shuffled.shards).as_mut_slice(), seed);
        shuffle(&mut shuffled.pods, seed.rotate_left(17));
        prop_assert_eq!(&run(&shuffled), &out);
        let mut again = inp.clone();
        again.previous = previous_of(&out);
        prop_assert_eq!(run(&again).moves, 0);
    }
}
