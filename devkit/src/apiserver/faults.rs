//! What tests script and observe about requests: run-time pacing knobs
//! (delays), scripted failures (any status code: 409, 410, 429 with
//! `Retry-After`, 500, ...), the bounded
//! request log with per-path counters, and TokenReview bookkeeping.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::options::{MockOptions, TokenReviewer};

/// Largest request body prefix the log keeps.
pub(crate) const BODY_PREFIX: usize = 4096;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// HTTP method, e.g. `PATCH`.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Raw query string (empty when none).
    pub query: String,
    /// `Content-Type`, if sent.
    pub content_type: Option<String>,
    /// Status code answered (200 for a watch that started).
    pub status: u16,
    /// When the request arrived.
    pub at: Instant,
    /// The first 4 KiB of the body, lossily decoded.
    pub body: String,
}

/// A scripted failure.
#[derive(Debug, Clone)]
struct FailRule {
    method: String,
    path_contains: String,
    code: u16,
    remaining: usize,
}

/// Knobs settable at run time.
#[derive(Debug, Clone)]
pub(crate) struct Knobs {
    pub list_delay: Duration,
    pub request_delay: Duration,
    /// Requests (method, or any when empty; a path part) whose answer is
    /// held this long after the request took effect.
    pub answer_delays: Vec<(String, String, Duration)>,
}

impl Knobs {
    /// How long the answer to `method` on `path` is held after it took
    /// effect: the first matching rule's delay.
    pub fn answer_delay(&self, method: &str, path: &str) -> Option<Duration> {
        self.answer_delays
            .iter()
            .find(|(m, part, _)| (m.is_empty() || m == method) && path.contains(part.as_str()))
            .map(|(_, _, delay)| *delay)
    }
}

/// Faults, pacing and the request log.
pub(crate) struct Faults {
    knobs: Mutex<Knobs>,
    rules: Mutex<Vec<FailRule>>,
    log: Mutex<VecDeque<RequestRecord>>,
    log_capacity: usize,
    counters: Mutex<HashMap<(String, String), u64>>,
    token_reviews: AtomicU64,
    reviewer: TokenReviewer,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("knobs", &self.knobs)
            .finish_non_exhaustive()
    }
}

impl Faults {
    /// Faults as `options` set them.
    pub fn new(options: &MockOptions) -> Self {
        Faults {
            knobs: Mutex::new(Knobs {
                list_delay: options.list_delay,
                request_delay: options.request_delay,
                answer_delays: Vec::new(),
            }),
            rules: Mutex::new(Vec::new()),
            log: Mutex::new(VecDeque::new()),
            log_capacity: options.request_log_capacity,
            counters: Mutex::new(HashMap::new()),
            token_reviews: AtomicU64::new(0),
            reviewer: options.token_reviewer.clone(),
        }
    }

    /// The current knobs.
    pub fn knobs(&self) -> Knobs {
        self.knobs.lock().clone()
    }

    /// Changes the knobs.
    pub fn set_knobs(&self, f: impl FnOnce(&mut Knobs)) {
        f(&mut self.knobs.lock());
    }

    /// Scripts `count` failures with `code` for requests whose method is
    /// `method` (any when empty) and whose path contains `path_contains`.
    pub fn fail_next(&self, method: &str, path_contains: &str, code: u16, count: usize) {
        self.rules.lock().push(FailRule {
            method: method.to_ascii_uppercase(),
            path_contains: path_contains.to_owned(),
            code,
            remaining: count,
        });
    }

    /// The scripted failure this request gets, if any (consumes one).
    pub fn take_failure(&self, method: &str, path: &str) -> Option<u16> {
        let mut rules = self.rules.lock();
        let i = rules.iter().position(|r| {
            (r.method.is_empty() || r.method == method) && path.contains(&r.path_contains)
        })?;
        let code = rules[i].code;
        rules[i].remaining -= 1;
        if rules[i].remaining == 0 {
            rules.remove(i);
        }
        Some(code)
    }

    /// Logs a finished request and counts it.
    pub fn record(&self, record: RequestRecord) {
        *self
            .counters
            .lock()
            .entry((record.method.clone(), record.path.clone()))
            .or_default() += 1;
        let mut log = self.log.lock();
        if log.len() >= self.log_capacity.max(1) {
            log.pop_front();
        }
        log.push_back(record);
    }

    /// The logged requests, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.log.lock().iter().cloned().collect()
    }

    /// Requests with `method` (any when empty) whose path contains
    /// `path_contains`, since the start.
    pub fn count(&self, method: &str, path_contains: &str) -> u64 {
        let method = method.to_ascii_uppercase();
        self.counters
            .lock()
            .iter()
            .filter(|((m, p), _)| (method.is_empty() || *m == method) && p.contains(path_contains))
            .map(|(_, n)| n)
            .sum()
    }

    /// Answers a TokenReview and counts it.
    pub fn review(&self, token: &str, audiences: &[String]) -> serde_json::Value {
        self.token_reviews.fetch_add(1, Ordering::SeqCst);
        (self.reviewer)(token, audiences)
    }

    /// TokenReviews answered.
    pub fn token_reviews(&self) -> u64 {
        self.token_reviews.load(Ordering::SeqCst)
    }
}
