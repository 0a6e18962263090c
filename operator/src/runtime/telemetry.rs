//! Logging setup: a `tracing` subscriber with an `EnvFilter` (the `RUST_LOG`
//! environment variable overrides the configured filter) and a choice of
//! human-readable text or one-JSON-object-per-line output for log collectors.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt;
use tracing_subscriber::prelude::*;

/// Output format of the operator's logs (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, for terminals and `kubectl logs`.
    #[default]
    Text,
    /// One JSON object per line, for log collectors (Loki, CloudWatch, …).
    Json,
}

/// Errors of [`init`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum TelemetryError {
    /// The filter directive (from `RUST_LOG` or the configured filter) does not parse.
    #[error("invalid log filter {filter:?} (from {origin}): {source}")]
    Filter {
        /// The offending directive string.
        filter: String,
        /// Where it came from: `RUST_LOG` or the command line.
        origin: &'static str,
        /// The parse error.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber was already installed (init called twice).
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInstalled(#[from] tracing_subscriber::util::TryInitError),
}

/// Builds the filter: `RUST_LOG` when set and non-empty, else `filter`
/// (e.g. `"info,shardring=debug"`).
pub(crate) fn env_filter(filter: &str) -> Result<EnvFilter, TelemetryError> {
    build_filter(std::env::var(EnvFilter::DEFAULT_ENV).ok(), filter)
}

fn build_filter(rust_log: Option<String>, filter: &str) -> Result<EnvFilter, TelemetryError> {
    let (directives, origin) = match rust_log {
        Some(value) if !value.trim().is_empty() => (value, "RUST_LOG"),
        _ => (filter.to_owned(), "the --log-filter option"),
    };
    EnvFilter::builder()
        .parse(&directives)
        .map_err(|source| TelemetryError::Filter {
            filter: directives,
            origin,
            source,
        })
}

/// Installs the global subscriber. Call once, first thing in `main`/`run`.
pub fn init(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = env_filter(filter)?;
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry.with(fmt::layer().with_target(true)).try_init(),
        // Flattened events and the current span's fields make each line a
        // self-contained record that log collectors can index.
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false),
            )
            .try_init(),
    }
    .map_err(TelemetryError::from)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_overrides_the_configured_filter() {
        let filter = build_filter(Some("warn,kube=debug".into()), "info").unwrap();
        assert_eq!(filter.to_string(), "kube=debug,warn");
        let filter = build_filter(Some("  ".into()), "info,shardring=debug").unwrap();
        assert_eq!(filter.to_string(), "shardring=debug,info");
        let filter = build_filter(None, "info").unwrap();
        assert_eq!(filter.to_string(), "info");
    }

    #[test]
    fn a_bad_directive_names_its_origin() {
        let error = build_filter(Some("shardring=loud".into()), "info").unwrap_err();
        assert!(error.to_string().contains("RUST_LOG"), "{error}");
        let error = build_filter(None, "shardring=loud").unwrap_err();
        assert!(error.to_string().contains("--log-filter"), "{error}");
    }
}
