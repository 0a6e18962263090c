//! The operator's single Prometheus registry (prefix `shardring`), the
//! process-level metrics every scrape reads from `/proc/self`, and encoding to
//! the OpenMetrics text format served on `/metrics`.
//!
//! # Adding metrics from another module
//!
//! Each module owns a small struct of metric handles and registers it once at
//! start-up, before the registry is frozen in an `Arc` for the server:
//!
//! ```
//! use prometheus_client::metrics::{counter::Counter, family::Family};
//! use prometheus_client::registry::Registry;
//!
//! /// Metrics of the reconcile loop.
//! #[derive(Clone, Default)]
//! pub struct ReconcileMetrics {
//!     pub reconciles: Counter,
//!     pub errors: Family<Vec<(&'static str, &'static str)>, Counter>,
//! }
//!
//! impl ReconcileMetrics {
//!     pub fn register(registry: &mut Registry) -> Self {
//!         let metrics = Self::default();
//!         // Exposed as `shardring_reconciles_total`.
//!         registry.register("reconciles", "Reconciles run", metrics.reconciles.clone());
//!         registry.register("reconcile_errors", "Reconcile errors by reason", metrics.errors.clone());
//!         metrics
//!     }
//! }
//!
//! let mut registry = shardring::runtime::metrics::new_registry();
//! let reconcile = ReconcileMetrics::register(&mut registry);
//! reconcile.reconciles.inc();
//! let text = shardring::runtime::metrics::encode(&registry).unwrap();
//! assert!(text.contains("shardring_reconciles_total 1"));
//! ```
//!
//! Metric handles are `Arc`s inside: clone the struct into every task.

use std::fmt::Write as _;
use std::sync::OnceLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// Prefix of every metric name the operator exports.
pub(crate) const PREFIX: &str = "shardring";

/// Content type of [`encode`]'s output (OpenMetrics text 1.0.0).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// A metric failed to encode (a bug in a metric or collector).
    #[error("encoding the metrics failed")]
    Encode(#[from] std::fmt::Error),
}

/// A new registry under the `shardring` prefix, with `shardring_build_info`
/// and the `shardring_process_*` metrics already registered.
pub fn new_registry() -> Registry {
    let mut registry = Registry::with_prefix(PREFIX);
    // A gauge of 1 with the version as its label, the form Prometheus'
    // own `prometheus_build_info` takes: OpenMetrics' `info` type is
    // unknown to the Prometheus text format (`promtool check metrics`
    // refuses it) and to Prometheus' own text parser.
    let build = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
    build
        .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION"))])
        .set(1);
    registry.register(
        "build_info",
        "Version of the running shardring operator (always 1)",
        build,
    );
    registry.register_collector(Box::new(ProcessCollector));
    registry
}

/// Content type of [`to_prometheus_text`]'s output (the Prometheus text
/// format 0.0.4).
pub(crate) const PROMETHEUS_TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Encodes the registry in the OpenMetrics text format (ends with `# EOF`).
pub fn encode(registry: &Registry) -> Result<String, MetricsError> {
    let mut text = String::with_capacity(8 * 1024);
    prometheus_client::encoding::text::encode(&mut text, registry)?;
    Ok(text)
}

/// Whether a scraper's `Accept` header asks for OpenMetrics (Prometheus
/// does, first); anything else (curl's `*/*`, no header, `text/plain`) is
/// answered in the Prometheus text format, as Go's client_golang does.
pub(crate) fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|accept| {
        accept
            .split(',')
            .any(|range| range.trim().starts_with("application/openmetrics-text"))
    })
}

/// The OpenMetrics text [`encode`] wrote, in the Prometheus text format
/// 0.0.4 (what `promtool check metrics`, older scrapers and most ad hoc
/// tools parse). The registry's families need three changes, all in the
/// comment lines: a counter's `# HELP`/`# TYPE` name the family without
/// `_total` in OpenMetrics but the samples' name (with it) in the text
/// format; `unknown` is `untyped`; `# UNIT` and `# EOF` do not exist. The
/// samples are the same (this registry writes no exemplars, timestamps or
/// `_created` series, and no `info` or `stateset` families).
pub(crate) fn to_prometheus_text(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(name) = line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" counter"))
        {
            counters.insert(name);
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let comment = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| Some((prefix, line.strip_prefix(prefix)?)));
        match comment {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let tail = if tail == "unknown" { "untyped" } else { tail };
                let total = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                let _ = writeln!(out, "{prefix}{name}{total} {tail}");
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Reads `/proc/self` on every scrape: memory, CPU, threads, file
/// descriptors and start time. On systems without `/proc` it exports nothing.
#[derive(Debug)]
pub(crate) struct ProcessCollector;

/// One reading of `/proc/self`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProcessStats {
    /// Resident set size, bytes (`VmRSS`).
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Number of OS threads.
    pub threads: i64,
    /// Process start, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: i64,
    /// Soft limit on file descriptors (`None` when unlimited).
    pub max_fds: Option<i64>,
}

/// Clock ticks per second of `/proc/<pid>/stat` times. USER_HZ is part of
/// the Linux user-space ABI and is 100 on every architecture we ship for.
const USER_HZ: f64 = 100.0;

impl ProcessStats {
    /// Reads the current process's figures; `None` without a Linux `/proc`.
    pub(crate) fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let boot_time = boot_time_seconds()?;
        let mut stats = Self::parse(&stat, &status, boot_time)?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        stats.open_fds = i64::try_from(open_fds).unwrap_or(i64::MAX);
        stats.max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|limits| parse_max_fds(&limits));
        Some(stats)
    }

    /// Parses `/proc/self/stat` and `/proc/self/status`; fds are left at 0.
    pub(crate) fn parse(stat: &str, status: &str, boot_time_seconds: f64) -> Option<Self> {
        // The command name (field 2) is in parentheses and may contain
        // spaces: split after the last ')'. Fields then start at field 3.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        let (utime, stime) = (field(14)?, field(15)?);
        let threads = field(20)?;
        let start_ticks = field(22)?;
        let virtual_bytes = field(23)?;
        let resident_kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())?;
        Some(Self {
            resident_bytes: resident_kib * 1024,
            virtual_bytes,
            cpu_seconds: (utime + stime) as f64 / USER_HZ,
            threads: i64::try_from(threads).unwrap_or(i64::MAX),
            start_time_seconds: boot_time_seconds + start_ticks as f64 / USER_HZ,
            open_fds: 0,
            max_fds: None,
        })
    }
}

/// System boot time (`btime` in `/proc/stat`), read once.
fn boot_time_seconds() -> Option<f64> {
    static BOOT: OnceLock<Option<f64>> = OnceLock::new();
    *BOOT.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        stat.lines()
            .find_map(|line| line.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    })
}

fn parse_max_fds(limits: &str) -> Option<i64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    soft.parse().ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(stats) = ProcessStats::read() else {
            return Ok(());
        };
        let mut name = String::new();
        let mut gauge = |encoder: &mut DescriptorEncoder,
                         suffix: &str,
                         help: &str,
                         unit: Option<&Unit>,
                         value: ConstGauge<f64>|
         -> Result<(), std::fmt::Error> {
            name.clear();
            write!(name, "process_{suffix}")?;
            let metric = encoder.encode_descriptor(&name, help, unit, value.metric_type())?;
            value.encode(metric)
        };
        gauge(
            &mut encoder,
            "resident_memory",
            "Resident memory size",
            Some(&Unit::Bytes),
            ConstGauge::new(stats.resident_bytes as f64),
        )?;
        gauge(
            &mut encoder,
            "virtual_memory",
            "Virtual memory size",
            Some(&Unit::Bytes),
            ConstGauge::new(stats.virtual_bytes as f64),
        )?;
        gauge(
            &mut encoder,
            "start_time",
            "Start time of the process since the Unix epoch",
            Some(&Unit::Seconds),
            ConstGauge::new(stats.start_time_seconds),
        )?;
        gauge(
            &mut encoder,
            "threads",
            "Number of OS threads",
            None,
            ConstGauge::new(stats.threads as f64),
        )?;
        gauge(
            &mut encoder,
            "open_fds",
            "Number of open file descriptors",
            None,
            ConstGauge::new(stats.open_fds as f64),
        )?;
        if let Some(max) = stats.max_fds {
            gauge(
                &mut encoder,
                "max_fds",
                "Maximum number of open file descriptors",
                None,
                ConstGauge::new(max as f64),
            )?;
        }
        let cpu = ConstCounter::new(stats.cpu_seconds);
        let metric = encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?;
        cpu.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::float_cmp)] // exact: 300 / 100 and 1.7e9 + 1000 / 100 are exactly representable
    fn parses_stat_with_spaces_in_the_command_name() {
        let stat = "4242 (shard ring) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 7 0 1000 52428800 3000 18446744073709551615";
        let status = "Name:\tshardring\nVmRSS:\t   12000 kB\nThreads:\t7\n";
        let stats = ProcessStats::parse(stat, status, 1_700_000_000.0).unwrap();
        assert_eq!(stats.resident_bytes, 12_000 * 1024);
        assert_eq!(stats.virtual_bytes, 52_428_800);
        assert_eq!(stats.cpu_seconds, 3.0);
        assert_eq!(stats.threads, 7);
        assert_eq!(stats.start_time_seconds, 1_700_000_010.0);
    }

    #[test]
    fn parses_the_soft_fd_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_fds(unlimited), None);
    }

    #[test]
    fn openmetrics_becomes_the_prometheus_text_format() {
        let openmetrics = "# HELP x_requests Requests.\n# TYPE x_requests counter\n\
                           x_requests_total{code=\"200\"} 3\n\
                           # HELP x_age Age.\n# TYPE x_age gauge\n# UNIT x_age seconds\nx_age 1.5\n\
                           # HELP x_odd Odd.\n# TYPE x_odd unknown\nx_odd 1\n# EOF\n";
        assert_eq!(
            to_prometheus_text(openmetrics),
            "# HELP x_requests_total Requests.\n# TYPE x_requests_total counter\n\
             x_requests_total{code=\"200\"} 3\n\
             # HELP x_age Age.\n# TYPE x_age gauge\nx_age 1.5\n\
             # HELP x_odd Odd.\n# TYPE x_odd untyped\nx_odd 1\n"
        );
    }

    #[test]
    fn only_a_scraper_that_asks_for_openmetrics_gets_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
                          text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(Some("text/plain; version=0.0.4")));
        assert!(!wants_openmetrics(None));
    }

    #[test]
    fn registry_exports_prefixed_process_and_build_metrics() {
        let text = encode(&new_registry()).unwrap();
        assert!(text.contains("# TYPE shardring_build_info gauge"), "{text}");
        assert!(text.contains("shardring_build_info{version=\""), "{text}");
        assert!(
            text.contains("shardring_process_resident_memory_bytes "),
            "{text}"
        );
        assert!(
            text.contains("shardring_process_cpu_seconds_total "),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
