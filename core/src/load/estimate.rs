//! One shard's smoothed load: an average of its readings (bytes and records
//! per second) that follows a change of level at once and otherwise grows
//! steadily more precise, and an estimate of the readings' noise, from
//! which the standard error of the average follows (the "noise" the engine
//! allows for).
//!
//! Two averages run side by side. The **fast** one has the group's
//! half-life: a new reading weighs `α = 1 − 2^(−Δt / halfLife)`, Δt the time
//! since the previous one. The **steady** one — the estimate, `rate` —
//! averages a load that holds still over [`STEADY_HALF_LIVES`] half-lives,
//! so its standard error is about a third of the fast one's: a pod's load is
//! known well enough to tell a pod a few tenths of a percent outside the
//! band from one inside it. Both weigh the first readings after a start
//! equally (never below `1/n` for the n-th), so neither starts biased.
//!
//! The steady average follows a change without waiting for it:
//! * a **shift** — a reading further than [`STEP_SIGMAS`] standard
//!   deviations of the readings' noise from the estimate, twice in a row on
//!   the same side (for Gaussian noise, about once in a billion pairs; for
//!   bounded noise never) — restarts both averages from those two readings:
//!   the estimate is at the new level two readings after a step, not seven
//!   eighths of the way there after three half-lives. The shift is recorded
//!   ([`Shift`]): the plan step counts a pod a shift pushed toward the
//!   band's edge as outside it without the noise margin (a shift is not
//!   noise);
//! * a **drift** — the fast average more than [`DRIFT_SIGMAS`] of its own
//!   standard errors from the steady one — moves the steady average to the
//!   fast one (with the fast one's precision): a load that drifts is
//!   followed with the half-life's lag, not the steady average's.
//!
//! The noise is measured from the differences between successive readings
//! (for independent noise of variance v a difference has variance 2v),
//! averaged four times slower than the fast average (`α/4`, equal weights at
//! first). Once measured, a difference is clipped at three standard
//! deviations, so a step in load adds at most that much noise, once. At a
//! shift the measured variance is scaled with the level (a reading's noise
//! is taken as proportional to the load it measures). An average with
//! weights `w_i` (summing to 1) of readings with independent noise of
//! variance v has variance `v · Σ w_i²`: its standard error; each average
//! keeps its `Σ w_i²`.

use std::time::Duration;

use jiff::Timestamp;

/// Readings before an estimate counts as a measurement (until then the
/// shard weighs the mean of the measured ones).
pub const MIN_READINGS: u32 = 3;

/// Readings before a shift can be told from noise (the noise is measured
/// from the differences between them).
pub const SHIFT_AFTER_READINGS: u32 = 10;

/// Half-lives over which a load that holds still is averaged.
pub const STEADY_HALF_LIVES: f64 = 8.0;

/// How far from the estimate, in standard deviations of the readings'
/// noise, a reading must be — twice in a row, on the same side — to count
/// as a shift of the load.
pub const STEP_SIGMAS: f64 = 4.0;

/// How far the fast average must be from the steady one, in standard
/// errors of the fast one, for the steady one to follow it.
pub const DRIFT_SIGMAS: f64 = 4.0;

/// A shift of a shard's load: a change of level that noise does not
/// explain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shift {
    /// When it was recognised (the second reading at the new level).
    pub at: Timestamp,
    /// The estimate before it, bytes per second.
    pub from: f64,
}

/// One shard's smoothed load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Smoothed bytes per second (the steady average).
    pub rate: f64,
    /// Smoothed records per second (the steady average's weights).
    pub records: f64,
    /// `Σ w_i²` of the steady average.
    weights: f64,
    /// The fast average (the group's half-life), bytes per second.
    fast: f64,
    /// `Σ w_i²` of the fast average.
    fast_weights: f64,
    /// Moving variance of the byte-rate readings' noise.
    variance: f64,
    /// The latest byte-rate reading.
    last: f64,
    /// The reading before, when it was further from the estimate than
    /// [`STEP_SIGMAS`] allow (the first half of a possible shift), and the
    /// estimate before it.
    surprise: Option<(f64, f64)>,
    /// Readings in the current averages (since the first or the last shift).
    run: u32,
    /// Readings taken.
    pub readings: u32,
    /// When the latest reading was taken.
    pub updated: Timestamp,
    /// The latest shift of the load, if one was seen.
    pub shift: Option<Shift>,
}

impl Estimate {
    /// An estimate from its first reading.
    pub fn first(bytes: f64, records: f64, at: Timestamp) -> Self {
        Self {
            rate: bytes,
            records,
            weights: 1.0,
            fast: bytes,
            fast_weights: 1.0,
            variance: 0.0,
            last: bytes,
            surprise: None,
            run: 1,
            readings: 1,
            updated: at,
            shift: None,
        }
    }

    /// Takes a reading at `at` (`half_life`: the smoothing's).
    pub fn update(&mut self, bytes: f64, records: f64, at: Timestamp, half_life: Duration) {
        let elapsed = at.duration_since(self.updated).as_secs_f64().max(0.001);
        let half_life = half_life.as_secs_f64().max(0.001);
        self.readings = self.readings.saturating_add(1);
        self.run = self.run.saturating_add(1);
        self.updated = self.updated.max(at);
        let equal = 1.0 / f64::from(self.run);
        let alpha = (1.0 - (-elapsed / (STEADY_HALF_LIVES * half_life)).exp2()).max(equal);
        let alpha_fast = (1.0 - (-elapsed / half_life).exp2()).max(equal);
        let surprising = self.surprising(bytes);
        if let (Some((before, from)), Some(above)) = (self.surprise, surprising)
            && (before > self.rate) == above
        {
            self.restart(before, from, bytes, records, at, alpha_fast);
            return;
        }
        self.surprise = surprising.map(|_| (bytes, self.rate));
        self.measure_noise(bytes, alpha_fast);
        self.rate += alpha * (bytes - self.rate);
        self.records += alpha * (records - self.records);
        self.weights = fold_weights(self.weights, alpha);
        self.fast += alpha_fast * (bytes - self.fast);
        self.fast_weights = fold_weights(self.fast_weights, alpha_fast);
        // Not on a surprising reading: it may be the first of a shift,
        // which the next reading tells.
        let fast_error = (self.variance * self.fast_weights).sqrt();
        if self.run > MIN_READINGS
            && surprising.is_none()
            && (self.fast - self.rate).abs() > DRIFT_SIGMAS * fast_error
        {
            self.rate = self.fast;
            self.weights = self.fast_weights;
        }
    }

    /// Whether `bytes` lies further above (`true`) or below the estimate
    /// than the readings' noise explains, once the noise is measured.
    fn surprising(&self, bytes: f64) -> Option<bool> {
        if self.readings < SHIFT_AFTER_READINGS || self.variance <= 0.0 {
            return None;
        }
        let spread = (self.variance * (1.0 + self.weights)).sqrt();
        let off = bytes - self.rate;
        (off.abs() > STEP_SIGMAS * spread).then_some(off > 0.0)
    }

    /// Folds the difference from the previous reading into the noise
    /// (`alpha_fast`: the fast average's weight of this reading).
    fn measure_noise(&mut self, bytes: f64, alpha_fast: f64) {
        // The n-th reading is the (n − 1)-th difference.
        let alpha_var = (alpha_fast / 4.0).max(1.0 / f64::from(self.readings - 1));
        let mut difference = bytes - self.last;
        if self.readings > MIN_READINGS && self.variance > 0.0 {
            let limit = 3.0 * (2.0 * self.variance).sqrt();
            difference = difference.clamp(-limit, limit);
        }
        self.variance += alpha_var * (difference * difference / 2.0 - self.variance);
        self.last = bytes;
    }

    /// Starts the averages again from `before` and `bytes`, two readings
    /// at a new level (`from`: the estimate before them).
    fn restart(
        &mut self,
        before: f64,
        from: f64,
        bytes: f64,
        records: f64,
        at: Timestamp,
        alpha_fast: f64,
    ) {
        let level = (before + bytes) / 2.0;
        if from > 0.0 && level > 0.0 {
            self.variance *= (level / from).powi(2);
        }
        self.shift = Some(Shift { at, from });
        self.last = before;
        self.measure_noise(bytes, alpha_fast);
        self.rate = level;
        self.fast = level;
        self.records = records;
        self.weights = 0.5;
        self.fast_weights = 0.5;
        self.surprise = None;
        self.run = 2;
    }

    /// Standard error of `rate`, bytes per second.
    pub fn noise(&self) -> f64 {
        (self.variance * self.weights).sqrt()
    }

    /// Whether it has enough readings to count as a measurement.
    pub fn is_measured(&self) -> bool {
        self.readings >= MIN_READINGS
    }

    /// Whether its latest reading is older than `stale_after` at `now`.
    pub fn is_stale(&self, now: Timestamp, stale_after: Duration) -> bool {
        now.duration_since(self.updated).as_secs_f64() > stale_after.as_secs_f64()
    }
}

/// `Σ w_i²` of an average with `weights` after a reading of weight `alpha`.
fn fold_weights(weights: f64, alpha: f64) -> f64 {
    (1.0 - alpha).powi(2) * weights + alpha * alpha
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }

    const HALF: Duration = Duration::from_secs(30);

    /// A pseudo-random number in [−1, 1].
    fn unit(i: i64) -> f64 {
        let x = i
            .cast_unsigned()
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29)
            ^ 0x5851_f42d;
        let x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    /// A standard normal number (Box–Muller on two of [`unit`]'s).
    fn normal(i: i64) -> f64 {
        let u1 = (unit(2 * i) + 1.0) / 2.0;
        let u2 = (unit(2 * i + 1) + 1.0) / 2.0;
        (-2.0 * u1.max(1e-300).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// An estimate fed `reading(i)` every 10 s for `i` in `range`.
    fn feed(e: &mut Option<Estimate>, range: std::ops::Range<i64>, reading: impl Fn(i64) -> f64) {
        for i in range {
            match e {
                Some(e) => e.update(reading(i), 0.0, t(i * 10_000), HALF),
                None => *e = Some(Estimate::first(reading(i), 0.0, t(i * 10_000))),
            }
        }
    }

    #[test]
    fn the_first_readings_average_equally() {
        let mut e = Estimate::first(100.0, 10.0, t(0));
        e.update(200.0, 20.0, t(10_000), HALF);
        e.update(300.0, 30.0, t(20_000), HALF);
        assert!((e.rate - 200.0).abs() < 1e-9, "{}", e.rate);
        assert!((e.records - 20.0).abs() < 1e-9);
        assert!(e.is_measured());
        assert!(e.shift.is_none());
    }

    #[test]
    fn a_load_that_holds_still_is_known_ever_more_precisely() {
        // Readings 100 ± 10, uniform (σ = 5.77), every 10 s with a 30 s
        // half-life: the steady average's weight floors at
        // α = 1 − 2^(−10/240) ≈ 0.0285, its standard error at
        // 5.77 · √(α / (2 − α)) ≈ 0.69 (the half-life's own average: 1.96).
        let mut e = None;
        feed(&mut e, 0..2000, |i| 100.0 + 10.0 * unit(i));
        let e = e.unwrap();
        assert!((e.rate - 100.0).abs() < 3.0 * 0.69, "{}", e.rate);
        assert!((e.noise() - 0.69).abs() < 0.15, "{}", e.noise());
        assert!(e.shift.is_none(), "noise is not a shift");
        // Ten readings in, equal weights: 5.77 / √10 ≈ 1.8.
        let mut early = None;
        feed(&mut early, 0..10, |i| 100.0 + 10.0 * unit(i));
        let noise = early.unwrap().noise();
        assert!((0.9..3.0).contains(&noise), "{noise}");
    }

    #[test]
    fn noise_alone_is_never_a_shift_and_stays_within_its_standard_error() {
        // 100,000 readings (eleven days at one every 10 s) of ±5 % uniform
        // noise, and as many of 2.89 % Gaussian noise (the same σ, with
        // tails): no shift, and the estimate never further from the truth
        // than five of its standard errors.
        for (name, noisy) in [
            (
                "uniform",
                (|i| 1000.0 * (1.0 + 0.05 * unit(i))) as fn(i64) -> f64,
            ),
            ("gaussian", |i| 1000.0 * (1.0 + 0.0289 * normal(i))),
        ] {
            let mut e = None;
            let mut worst: f64 = 0.0;
            for chunk in 0..1000 {
                feed(&mut e, chunk * 100..(chunk + 1) * 100, noisy);
                let e = e.as_ref().unwrap();
                if chunk > 0 {
                    worst = worst.max((e.rate - 1000.0).abs() / e.noise());
                }
                assert!(
                    e.shift.is_none(),
                    "{name}: a shift at reading {}",
                    e.readings
                );
            }
            assert!(worst < 5.0, "{name}: {worst} standard errors off");
        }
    }

    #[test]
    fn a_shift_is_followed_two_readings_after_it() {
        // ±5 % uniform noise around 1000, then the load doubles.
        let noisy = |i: i64, level: f64| level * (1.0 + 0.05 * unit(i));
        let mut e = None;
        feed(&mut e, 0..200, |i| noisy(i, 1000.0));
        let before = e.unwrap().noise();
        feed(&mut e, 200..202, |i| noisy(i, 2000.0));
        let after = e.unwrap();
        assert!((after.rate - 2000.0).abs() < 100.0, "{}", after.rate);
        let shift = after.shift.expect("a shift");
        assert_eq!(shift.at, t(201 * 10_000));
        assert!((shift.from - 1000.0).abs() < 10.0, "{}", shift.from);
        // Two readings: a standard error of the readings' σ (scaled with
        // the load) over √2.
        assert!(
            after.noise() > 10.0 * before,
            "{} vs {before}",
            after.noise()
        );
        // Twenty readings on, precise again, and no second shift.
        feed(&mut e, 202..222, |i| noisy(i, 2000.0));
        let later = e.unwrap();
        assert!(
            (later.rate - 2000.0).abs() < 4.0 * later.noise(),
            "{} ± {}",
            later.rate,
            later.noise()
        );
        assert!(later.noise() < 20.0, "{}", later.noise());
        assert_eq!(later.shift, Some(shift));
        // One reading off alone is not a shift.
        let mut spike = None;
        feed(&mut spike, 0..200, |i| noisy(i, 1000.0));
        feed(&mut spike, 200..203, |i| {
            if i == 201 { 2000.0 } else { noisy(i, 1000.0) }
        });
        assert!(spike.unwrap().shift.is_none());
    }

    #[test]
    fn a_drifting_load_is_followed_with_the_half_lifes_lag() {
        // The load rises 0.2 % per reading (12 % a minute) under ±5 %
        // noise: the half-life's average lags 30 s / ln 2 ≈ 4.3 readings
        // (≈ 0.9 %) behind; the steady one, left alone, would lag eight
        // times that. It follows the fast one instead.
        let level = |i: i64| 1000.0 * (1.0 + 0.002 * i as f64);
        let mut e = None;
        feed(&mut e, 0..300, |i| level(i) * (1.0 + 0.05 * unit(i)));
        let e = e.unwrap();
        let truth = level(299);
        assert!(
            (truth - e.rate) / truth < 0.03,
            "{} behind {truth}",
            truth - e.rate
        );
    }

    #[test]
    fn stale_after_the_limit() {
        let e = Estimate::first(1.0, 0.0, t(0));
        assert!(!e.is_stale(t(120_000), Duration::from_secs(120)));
        assert!(e.is_stale(t(120_001), Duration::from_secs(120)));
        assert!(!e.is_measured());
    }
}
