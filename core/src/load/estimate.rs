//! One shard's smoothed load: an exponential moving average of its readings
//! (bytes and records per second) with a half-life in time, and an estimate
//! of the readings' noise, from which the standard error of the average
//! follows (the "noise" the engine allows for).
//!
//! The weight of a new reading is `α = 1 − 2^(−Δt / halfLife)`, Δt the time
//! since the previous one, but never below `1/n` for the n-th reading: the
//! first readings are averaged with equal weights, so the average does not
//! start biased toward its first value.
//!
//! The noise is measured from the differences between successive readings
//! (for independent noise of variance v a difference has variance 2v),
//! averaged four times slower than the load (`α/4`, equal weights at
//! first): a load that drifts, or rises while the average catches up, adds
//! almost nothing to it, where the spread around the lagging average would
//! count the whole rise. Once measured, a difference is clipped at three
//! standard deviations, so a step in load adds at most that much noise, once,
//! instead of hiding itself behind a wider margin for minutes. For readings
//! with independent noise of variance v, an average with weight α has
//! variance `v · α / (2 − α)`: its standard error.

use std::time::Duration;

use jiff::Timestamp;

/// Readings before an estimate counts as a measurement (until then the
/// shard weighs the mean of the measured ones).
pub const MIN_READINGS: u32 = 3;

/// One shard's smoothed load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Smoothed bytes per second.
    pub rate: f64,
    /// Smoothed records per second.
    pub records: f64,
    /// Moving variance of the byte-rate readings' noise.
    variance: f64,
    /// The latest byte-rate reading.
    last: f64,
    /// Weight the latest reading had.
    alpha: f64,
    /// Readings taken.
    pub readings: u32,
    /// When the latest reading was taken.
    pub updated: Timestamp,
}

impl Estimate {
    /// An estimate from its first reading.
    pub fn first(bytes: f64, records: f64, at: Timestamp) -> Self {
        Self {
            rate: bytes,
            records,
            variance: 0.0,
            last: bytes,
            alpha: 1.0,
            readings: 1,
            updated: at,
        }
    }

    /// Takes a reading at `at` (`half_life`: the smoothing's).
    pub fn update(&mut self, bytes: f64, records: f64, at: Timestamp, half_life: Duration) {
        let elapsed = at.duration_since(self.updated).as_secs_f64().max(0.001);
        let decay = (-elapsed / half_life.as_secs_f64().max(0.001)).exp2();
        self.readings = self.readings.saturating_add(1);
        let equal = 1.0 / f64::from(self.readings);
        let alpha = (1.0 - decay).max(equal);
        // The n-th reading is the (n − 1)-th difference.
        let alpha_var = (alpha / 4.0).max(1.0 / f64::from(self.readings - 1));
        let mut difference = bytes - self.last;
        if self.readings > MIN_READINGS && self.variance > 0.0 {
            let limit = 3.0 * (2.0 * self.variance).sqrt();
            difference = difference.clamp(-limit, limit);
        }
        self.variance += alpha_var * (difference * difference / 2.0 - self.variance);
        self.last = bytes;
        self.rate += alpha * (bytes - self.rate);
        self.records += alpha * (records - self.records);
        self.alpha = alpha;
        self.updated = self.updated.max(at);
    }

    /// Standard error of `rate`, bytes per second.
    pub fn noise(&self) -> f64 {
        (self.variance * self.alpha / (2.0 - self.alpha)).sqrt()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }

    #[test]
    fn the_first_readings_average_equally_then_the_half_life_rules() {
        let half = Duration::from_secs(30);
        let mut e = Estimate::first(100.0, 10.0, t(0));
        e.update(200.0, 20.0, t(10_000), half);
        e.update(300.0, 30.0, t(20_000), half);
        assert!((e.rate - 200.0).abs() < 1e-9, "{}", e.rate);
        assert!((e.records - 20.0).abs() < 1e-9);
        assert!(e.is_measured());
        // Far along, a reading 30 s after the last one has half the weight.
        let mut e = Estimate::first(0.0, 0.0, t(0));
        for i in 1..100 {
            e.update(0.0, 0.0, t(i * 1000), half);
        }
        e.update(100.0, 0.0, t(129_000), half);
        assert!((e.rate - 50.0).abs() < 1e-6, "{}", e.rate);
    }

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

    #[test]
    fn the_noise_matches_the_readings_spread() {
        // Readings 100 ± 10, uniform (σ = 5.77), every 10 s with a 30 s
        // half-life: α ≈ 0.206, standard error ≈ 5.77 · √(α / (2 − α)) ≈ 1.96.
        let half = Duration::from_secs(30);
        let mut e = Estimate::first(100.0, 0.0, t(0));
        for i in 1..2000 {
            e.update(100.0 + 10.0 * unit(i), 0.0, t(i * 10_000), half);
        }
        assert!((e.rate - 100.0).abs() < 3.0, "{}", e.rate);
        assert!((e.noise() - 1.96).abs() < 0.5, "{}", e.noise());
    }

    #[test]
    fn a_step_in_load_barely_widens_the_noise() {
        // ±5 % uniform noise around 1000 (σ = 28.9), then the load doubles.
        let half = Duration::from_secs(30);
        let noisy = |i: i64, level: f64| level * (1.0 + 0.05 * unit(i));
        let mut e = Estimate::first(noisy(0, 1000.0), 0.0, t(0));
        for i in 1..200 {
            e.update(noisy(i, 1000.0), 0.0, t(i * 10_000), half);
        }
        let before = e.noise();
        // σ·√(α/(2−α)) with α ≈ 0.206: about 9.8.
        assert!((before - 9.8).abs() < 3.0, "{before}");
        for i in 200..220 {
            e.update(noisy(i, 2000.0), 0.0, t(i * 10_000), half);
        }
        assert!((e.rate - 2000.0).abs() < 40.0, "{}", e.rate);
        assert!(e.noise() < 2.5 * 2.0 * before, "{} vs {before}", e.noise());
    }

    #[test]
    fn stale_after_the_limit() {
        let e = Estimate::first(1.0, 0.0, t(0));
        assert!(!e.is_stale(t(120_000), Duration::from_secs(120)));
        assert!(e.is_stale(t(120_001), Duration::from_secs(120)));
        assert!(!e.is_measured());
    }
}
