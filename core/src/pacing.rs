//! Move pacing: when the engine may make optional (balancing) moves, and how
//! many. Optional moves wait `rebalance.delay` after the last change of the
//! eligible pod set (each change restarts the delay), so a rolling deploy
//! lands the old pods' shards on the new pods as required moves instead of
//! shuffling them at every step; and a sliding-window budget
//! (`rebalance.maxMovesPerWindow` per `rebalance.window`) bounds them.
//! Required moves are never delayed or refused, but they are logged and use
//! up the budget.
//!
//! Everything is derived from the status (`lastPodChange`, `podSetDigest`,
//! `moveLog`) and `now`, so a restarted operator keeps the delay and the
//! budget where they were.

use std::time::Duration;

use jiff::Timestamp;

use crate::crds::shard_group::{MoveLogEntry, RebalanceSpec};
use crate::engine::Rebalance;

/// What the engine may do in this plan, and the bookkeeping to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pacing {
    /// Whether optional moves are allowed at all.
    pub rebalance: Rebalance,
    /// Most optional moves this plan may make (`None`: no budget configured).
    pub max_optional_moves: Option<u32>,
    /// When the eligible pod set last changed.
    pub last_pod_change: Timestamp,
    /// Digest of the eligible pod set.
    pub pod_set_digest: String,
    /// The move log within the window, oldest first.
    pub log: Vec<MoveLogEntry>,
    /// The configured budget per window.
    pub budget: Option<u64>,
    /// How long until pacing may allow more optional moves (end of the delay,
    /// or the oldest log entry leaving the window), if it holds them back now.
    pub next_change: Option<Duration>,
}

/// Digest (FNV-1a 64, hex) of a set of pod names; order does not matter.
pub(crate) fn pod_set_digest<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut sorted: Vec<&str> = names.into_iter().collect();
    sorted.sort_unstable();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for name in sorted {
        for byte in name.bytes().chain(std::iter::once(b'\n')) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

/// Works out the pacing of one plan from the spec, the stored bookkeeping,
/// the eligible pods and `now`. Invalid durations were refused before.
pub(crate) fn pace<'a>(
    spec: &RebalanceSpec,
    stored_change: Option<Timestamp>,
    stored_digest: Option<&str>,
    stored_log: &[MoveLogEntry],
    eligible: impl IntoIterator<Item = &'a str>,
    now: Timestamp,
) -> Pacing {
    let delay = spec.delay().unwrap_or_default();
    let window = spec.window().unwrap_or(Duration::from_secs(60));
    let digest = pod_set_digest(eligible);
    let last_pod_change = match (stored_digest, stored_change) {
        (Some(d), Some(t)) if d == digest => t.min(now),
        _ => now,
    };
    let window_start = sub(now, window);
    let log: Vec<MoveLogEntry> = stored_log
        .iter()
        .filter(|e| e.at > window_start && e.at <= now)
        .copied()
        .collect();
    let used: u64 = log.iter().map(|e| e.moves).sum();
    let budget = spec.max_moves_per_window.map(u64::from);
    let delay_end = add(last_pod_change, delay);
    let mut next_change = None;
    let rebalance = if now < delay_end {
        next_change = Some(delay_end.duration_since(now).unsigned_abs());
        Rebalance::RequiredOnly
    } else {
        Rebalance::All
    };
    let max_optional_moves =
        budget.map(|b| u32::try_from(b.saturating_sub(used)).unwrap_or(u32::MAX));
    if rebalance == Rebalance::All
        && max_optional_moves == Some(0)
        && let Some(oldest) = log.first()
    {
        next_change = Some(add(oldest.at, window).duration_since(now).unsigned_abs());
    }
    Pacing {
        rebalance,
        max_optional_moves,
        last_pod_change,
        pod_set_digest: digest,
        log,
        budget,
        next_change,
    }
}

impl Pacing {
    /// Logs `moves` made at `now` and returns the stored log and the budget
    /// left.
    pub(crate) fn record(&self, moves: u64, now: Timestamp) -> (Vec<MoveLogEntry>, Option<u64>) {
        let mut log = self.log.clone();
        if moves > 0 {
            match log.last_mut() {
                Some(last) if last.at == now => last.moves += moves,
                _ => log.push(MoveLogEntry { at: now, moves }),
            }
        }
        let used: u64 = log.iter().map(|e| e.moves).sum();
        let remaining = self.budget.map(|b| b.saturating_sub(used));
        (log, remaining)
    }
}

/// `t + d`, saturating at the end of time.
pub(crate) fn add(t: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

fn sub(t: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_sub(d).ok())
        .unwrap_or(Timestamp::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(delay: &str, max: Option<u32>, window: &str) -> RebalanceSpec {
        RebalanceSpec {
            delay: delay.into(),
            max_moves_per_window: max,
            window: window.into(),
            ..RebalanceSpec::default()
        }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn entry(at: Timestamp, moves: u64) -> MoveLogEntry {
        MoveLogEntry { at, moves }
    }

    #[test]
    fn digest_ignores_order() {
        assert_eq!(pod_set_digest(["a", "b"]), pod_set_digest(["b", "a"]));
        assert_ne!(pod_set_digest(["a", "b"]), pod_set_digest(["a"]));
        assert_ne!(pod_set_digest(["ab"]), pod_set_digest(["a", "b"]));
    }

    #[test]
    fn delay_restarts_on_change_and_survives_restart() {
        let s = spec("30s", None, "1m");
        let first = pace(&s, None, None, &[], ["a", "b"], t(0));
        assert_eq!(first.rebalance, Rebalance::RequiredOnly);
        assert_eq!(first.next_change, Some(Duration::from_secs(30)));
        let change = first.last_pod_change;
        // Same pod set 20 s later (e.g. after a restart): still waiting.
        let later = pace(
            &s,
            Some(change),
            Some(&first.pod_set_digest),
            &[],
            ["b", "a"],
            t(20),
        );
        assert_eq!(later.rebalance, Rebalance::RequiredOnly);
        assert_eq!(later.last_pod_change, t(0));
        let done = pace(
            &s,
            Some(change),
            Some(&first.pod_set_digest),
            &[],
            ["a", "b"],
            t(30),
        );
        assert_eq!(done.rebalance, Rebalance::All);
        // A change restarts the delay.
        let changed = pace(
            &s,
            Some(change),
            Some(&first.pod_set_digest),
            &[],
            ["a"],
            t(40),
        );
        assert_eq!(changed.rebalance, Rebalance::RequiredOnly);
        assert_eq!(changed.last_pod_change, t(40));
    }

    #[test]
    fn budget_slides_with_the_window() {
        let s = spec("0s", Some(5), "1m");
        let digest = pod_set_digest(["a"]);
        let log = vec![entry(t(0), 3), entry(t(30), 2)];
        let p = pace(&s, Some(t(-100)), Some(&digest), &log, ["a"], t(45));
        assert_eq!(p.max_optional_moves, Some(0));
        assert_eq!(p.next_change, Some(Duration::from_secs(15)));
        let p = pace(&s, Some(t(-100)), Some(&digest), &log, ["a"], t(60));
        assert_eq!(p.max_optional_moves, Some(3));
        let (entries, remaining) = p.record(2, t(60));
        assert_eq!(entries, vec![entry(t(30), 2), entry(t(60), 2)]);
        assert_eq!(remaining, Some(1));
        assert_eq!(t(5).to_string().parse(), Ok(entry(t(5), 1)));
        assert!("garbage 3".parse::<MoveLogEntry>().is_err());
    }
}
