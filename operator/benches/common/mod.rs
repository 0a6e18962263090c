//! What the benches that run `shardring run` as a child share: its command
//! (under `SHARDRING_BENCH_WRAP` when set, another build's binary with
//! `SHARDRING_BENCH_OPERATOR`, with `MALLOC_ARENA_MAX=1` as the
//! Deployment runs it), memory figures read from `/proc/<pid>/status`, and
//! percentiles of sorted durations. Included by each bench with `mod common;`.

// Each bench uses what it needs of this module.
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

/// `shardring run`'s binary, under `SHARDRING_BENCH_WRAP` when set (e.g.
/// `"heaptrack -o /tmp/ht"`, to see where its memory goes: the RSS figures
/// then measure the wrapper), with `MALLOC_ARENA_MAX=1` as the Deployment
/// and the image run it (docs/deploy.md, Memory) unless the bench's
/// environment sets it (`MALLOC_ARENA_MAX=16` measures glibc's default on
/// two cores instead).
///
/// `SHARDRING_BENCH_OPERATOR=/path/to/shardring` runs that binary instead of
/// the one built with the bench (an older build, to compare back to back).
/// The endpoint bench stops the operator by its process name, `shardring`
/// (under a wrapper too), so name the file so. heaptrack sees only what goes
/// through `malloc`, not the binary's own allocations (jemalloc's): to see
/// those, wrap a build whose `main.rs` sets no `#[global_allocator]`.
pub fn operator_command() -> Command {
    let binary = std::env::var("SHARDRING_BENCH_OPERATOR")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_shardring").to_owned());
    let mut command = match std::env::var("SHARDRING_BENCH_WRAP") {
        Ok(wrap) => {
            let mut words = wrap.split_whitespace();
            let mut command = Command::new(words.next().expect("a command to wrap with"));
            command.args(words).arg(&binary);
            command
        }
        Err(_) => Command::new(&binary),
    };
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        command.env("MALLOC_ARENA_MAX", "1");
    }
    command
}

/// A memory field of `/proc/<pid>/status` (`"VmHWM:"`, `"VmRSS:"`) in MiB;
/// `pid` `"self"` is this process. NaN when it cannot be read.
pub fn status_mib(pid: &str, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The `p` quantile of `sorted` (zero when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // A float-to-int cast saturates, and the index is clamped to the slice below.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}
