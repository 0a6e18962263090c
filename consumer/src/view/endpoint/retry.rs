//! When to send the next request to the consumer endpoint: the pure retry
//! policy shared by the view long-poll and the release sender. It reads the
//! server's pacing headers (`Retry-After`, `X-RateLimit-Remaining`/`Reset`)
//! and classifies each failure:
//!
//! - 429 `RateLimited`: wait `Retry-After` (never less);
//! - 503 `NotLeader`: retry at once on a new connection, a few times, then
//!   with a small backoff (the Service may route to the old leader a while);
//! - network errors and other 5xx: exponential backoff with jitter, capped
//!   at a few seconds;
//! - 401: the token is re-read before every request; back off meanwhile;
//! - 403 `IpMismatch` or `NotMember` before the first answer, in a pod's
//!   first seconds ([`NEW_POD_WINDOW`]): the operator may not have seen the
//!   pod (or its IP) yet, so retry quickly (100 ms, doubling); after that,
//!   as a refusal;
//! - 409 `FutureEpoch` on a release: the view came from a document the
//!   leader wrote but has not taken in yet (a ConfigMap watch can be that
//!   fast); it does within milliseconds, so retry quickly (10 ms, doubling);
//! - 403/404 and other refusals: the configuration is wrong, back off longer.
//!
//! After any answer, `X-RateLimit-Remaining: 0` means wait until the window
//! resets before the next request, so a well-behaved client never sees 429.

use std::time::{Duration, Instant};

use http::HeaderMap;
use shardring_crds::endpoint::{HEADER_LIMIT, HEADER_REMAINING, HEADER_RESET};

/// Immediate retries after `NotLeader` before backing off.
pub const NOT_LEADER_IMMEDIATE_RETRIES: u32 = 3;

/// How long after it starts (and before its first answer) a pod retries a
/// 403 `IpMismatch`/`NotMember` quickly.
pub const NEW_POD_WINDOW: Duration = Duration::from_secs(5);

/// The server's rate-limit headers on one answer (absent headers: `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimit {
    /// `X-RateLimit-Limit`: requests per window.
    pub limit: Option<u64>,
    /// `X-RateLimit-Remaining`: requests left in this window.
    pub remaining: Option<u64>,
    /// `X-RateLimit-Reset`: time until the window ends.
    pub reset: Option<Duration>,
}

impl RateLimit {
    /// Reads the headers of an answer.
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .and_then(|text| text.trim().parse::<u64>().ok())
        };
        Self {
            limit: number(HEADER_LIMIT),
            remaining: number(HEADER_REMAINING),
            reset: number(HEADER_RESET).map(Duration::from_secs),
        }
    }

    /// How long to hold the next request: until the window resets when none
    /// is left in it (a reset of 0 or none given: one second).
    pub fn hold(&self) -> Option<Duration> {
        (self.remaining == Some(0)).then(|| {
            self.reset
                .filter(|reset| !reset.is_zero())
                .unwrap_or(Duration::from_secs(1))
        })
    }
}

/// `Retry-After` in whole seconds (the endpoint never sends an HTTP date).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// What went wrong with one request, as far as the retry policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 429: `Retry-After` (if given).
    RateLimited(Option<Duration>),
    /// 503 `NotLeader`: this replica is not the leader.
    NotLeader,
    /// No answer: connect, TLS, I/O or timeout; or a 5xx other than `NotLeader`.
    Transient,
    /// 401: the token is missing, invalid or expired.
    Unauthorized,
    /// 403 `IpMismatch` or `NotMember`: the caller is not (yet) known as
    /// a member pod with this IP; for a pod that just started, the operator
    /// may not have seen it yet.
    NotYetKnown,
    /// 409 `FutureEpoch`: the leader has not taken in the document the
    /// request's epoch comes from yet (it does right after writing it).
    NotYetPublished,
    /// 403, 404 and other refusals a retry soon will not fix.
    Refused,
}

/// Exponential backoff with jitter: the n-th delay is drawn from
/// `[d/2, d]` with `d = min(cap, base · 2ⁿ)`.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    /// Starts at `base`, never above `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            attempt: 0,
        }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let full = shardring_backoff::ceiling(self.base, self.cap, self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        let half = full / 2;
        half + half.mul_f64(shardring_backoff::jitter_unit())
    }

    /// Back to the first delay.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// The policy's state for one request stream (the long-poll, or the
/// release sender).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    transient: Backoff,
    not_leader: Backoff,
    not_yet_known: Backoff,
    not_yet_published: Backoff,
    refused: Backoff,
    not_leader_in_a_row: u32,
    /// Until when a `NotYetKnown` is retried quickly (`None` once an
    /// answer came back: the pod is known).
    new_pod_until: Option<Instant>,
}

impl Default for RetryPolicy {
    /// A policy for a stream that starts now (as the pod does).
    fn default() -> Self {
        Self::started_at(Instant::now())
    }
}

impl RetryPolicy {
    /// A policy for a stream of a pod that started at `started`.
    pub fn started_at(started: Instant) -> Self {
        Self {
            transient: Backoff::new(Duration::from_millis(100), Duration::from_secs(5)),
            not_leader: Backoff::new(Duration::from_millis(100), Duration::from_secs(2)),
            not_yet_known: Backoff::new(Duration::from_millis(100), Duration::from_secs(2)),
            not_yet_published: Backoff::new(Duration::from_millis(10), Duration::from_secs(1)),
            refused: Backoff::new(Duration::from_secs(2), Duration::from_secs(60)),
            not_leader_in_a_row: 0,
            new_pod_until: started.checked_add(NEW_POD_WINDOW),
        }
    }

    /// An answer came back: every backoff starts over.
    pub fn succeeded(&mut self) {
        self.transient.reset();
        self.not_leader.reset();
        self.not_yet_known.reset();
        self.not_yet_published.reset();
        self.refused.reset();
        self.not_leader_in_a_row = 0;
        self.new_pod_until = None;
    }

    /// How long to wait before retrying after `failure`.
    pub fn delay(&mut self, failure: Failure) -> Duration {
        if failure != Failure::NotLeader {
            self.not_leader_in_a_row = 0;
            self.not_leader.reset();
        }
        match failure {
            Failure::RateLimited(after) => after.unwrap_or(Duration::from_secs(1)),
            Failure::NotLeader => {
                self.not_leader_in_a_row = self.not_leader_in_a_row.saturating_add(1);
                if self.not_leader_in_a_row <= NOT_LEADER_IMMEDIATE_RETRIES {
                    Duration::ZERO
                } else {
                    self.not_leader.next_delay()
                }
            }
            Failure::Transient => self.transient.next_delay(),
            Failure::NotYetPublished => self.not_yet_published.next_delay(),
            Failure::NotYetKnown if self.new_pod_until.is_some_and(|u| Instant::now() < u) => {
                self.not_yet_known.next_delay()
            }
            Failure::NotYetKnown | Failure::Unauthorized | Failure::Refused => {
                self.refused.next_delay()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn reads_the_pacing_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-limit", HeaderValue::from_static("10"));
        headers.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        headers.insert("x-ratelimit-reset", HeaderValue::from_static("7"));
        headers.insert("retry-after", HeaderValue::from_static(" 3 "));
        let rate = RateLimit::from_headers(&headers);
        assert_eq!(rate.limit, Some(10));
        assert_eq!(rate.hold(), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert("x-ratelimit-remaining", HeaderValue::from_static("4"));
        assert_eq!(RateLimit::from_headers(&headers).hold(), None);
        assert_eq!(RateLimit::default().hold(), None);
        headers.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2026"));
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn not_leader_retries_at_once_then_backs_off() {
        let mut policy = RetryPolicy::default();
        for _ in 0..NOT_LEADER_IMMEDIATE_RETRIES {
            assert_eq!(policy.delay(Failure::NotLeader), Duration::ZERO);
        }
        assert!(policy.delay(Failure::NotLeader) > Duration::ZERO);
        policy.succeeded();
        assert_eq!(policy.delay(Failure::NotLeader), Duration::ZERO);
    }

    #[test]
    fn a_new_pod_not_yet_known_retries_quickly_then_backs_off_as_refused() {
        let mut policy = RetryPolicy::default();
        let quick: Vec<Duration> = (0..4).map(|_| policy.delay(Failure::NotYetKnown)).collect();
        assert!(
            quick[0] >= Duration::from_millis(50) && quick[0] <= Duration::from_millis(100),
            "{quick:?}"
        );
        assert!(quick[3] <= Duration::from_millis(800), "{quick:?}");
        // Once it was answered, the pod is known: a refusal now is one.
        policy.succeeded();
        assert!(policy.delay(Failure::NotYetKnown) >= Duration::from_secs(1));

        let past = Instant::now()
            .checked_sub(NEW_POD_WINDOW + Duration::from_secs(1))
            .expect("the clock is past the window");
        let mut old = RetryPolicy::started_at(past);
        assert!(old.delay(Failure::NotYetKnown) >= Duration::from_secs(1));
    }

    #[test]
    fn transient_failures_back_off_exponentially_up_to_the_cap() {
        let mut policy = RetryPolicy::default();
        let delays: Vec<Duration> = (0..12).map(|_| policy.delay(Failure::Transient)).collect();
        assert!(delays[0] >= Duration::from_millis(50) && delays[0] <= Duration::from_millis(100));
        assert!(delays[4] >= Duration::from_millis(800), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(5)),
            "{delays:?}"
        );
        assert!(delays[11] >= Duration::from_millis(2500), "{delays:?}");
        policy.succeeded();
        assert!(policy.delay(Failure::Transient) <= Duration::from_millis(100));
    }

    #[test]
    fn rate_limited_waits_exactly_what_the_server_says() {
        let mut policy = RetryPolicy::default();
        assert_eq!(
            policy.delay(Failure::RateLimited(Some(Duration::from_secs(4)))),
            Duration::from_secs(4)
        );
        assert_eq!(
            policy.delay(Failure::RateLimited(None)),
            Duration::from_secs(1)
        );
        assert!(policy.delay(Failure::Refused) >= Duration::from_secs(1));
    }

    #[test]
    fn a_document_not_taken_in_yet_is_asked_again_within_milliseconds() {
        let mut policy = RetryPolicy::default();
        let delays: Vec<Duration> = (0..8)
            .map(|_| policy.delay(Failure::NotYetPublished))
            .collect();
        assert!(delays[0] >= Duration::from_millis(5) && delays[0] <= Duration::from_millis(10));
        assert!(delays[1] <= Duration::from_millis(20), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(1)),
            "{delays:?}"
        );
    }
}
