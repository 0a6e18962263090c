//! The consumer endpoint as a view source: the operator's leader serves each
//! pod its own view over HTTPS (wire contract: [`shardring_crds::endpoint`]),
//! answering a long-poll the moment the view changes, and takes release
//! acknowledgements that let the next owner start at once.
//!
//! - [`client`]: the HTTPS client (only the endpoint's CA trusted; token and
//!   CA re-read from their projected files before each request), with
//!   [`error`] (what a request can end in) and [`tls`] (its rustls setup);
//! - [`retry`]: the pure retry policy (429 `Retry-After`, rate-limit
//!   headers, `NotLeader`, backoff with jitter);
//! - [`source`]: [`EndpointSource`], the long-poll feeding a
//!   [`ViewPublisher`](crate::view::ViewPublisher) beside the other sources;
//! - [`outbox`] and [`release`]: [`ReleaseSender`], the acknowledgements of
//!   released shards, re-sent across leader changes while still revoking;
//! - [`load`]: [`LoadReporter`], the load this pod reads per shard
//!   (counted by a [`LoadMeter`]), for `balance: throughput`.
//!
//! [`EndpointArgs`] is the command line of all this, shared by the reference
//! consumer and whoever builds its command line.

pub mod client;
pub mod error;
pub mod load;
pub mod outbox;
pub mod release;
pub mod retry;
pub mod source;
pub mod tls;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub use client::{EndpointClient, EndpointConfig, EndpointError};
pub use load::{LoadMeter, LoadReporter, Metered};
pub use outbox::{AckState, Outbox, OutboxEntry};
pub use release::ReleaseSender;
pub use source::{EndpointHandle, EndpointSource, EndpointStatus};

/// The endpoint flags of a consumer's command line (clap: flatten it).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct EndpointArgs {
    /// The consumer endpoint, e.g.
    /// `https://shardring-endpoint.shardring-system.svc`; unset: not used.
    /// It runs beside the other view sources (needs --shard-group).
    #[arg(long, env = "SHARDRING_ENDPOINT_URL")]
    pub endpoint_url: Option<String>,
    /// The projected service-account token (audience `shardring.io`),
    /// re-read before every request.
    #[arg(long, env = "SHARDRING_ENDPOINT_TOKEN_FILE", default_value = client::DEFAULT_TOKEN_FILE)]
    pub endpoint_token_file: PathBuf,
    /// The endpoint's CA certificate (PEM), the only CA trusted; re-read
    /// when it changes.
    #[arg(long, env = "SHARDRING_ENDPOINT_CA_FILE", default_value = client::DEFAULT_CA_FILE)]
    pub endpoint_ca_file: PathBuf,
    /// How long each long-poll waits for a newer view, in seconds.
    #[arg(long, env = "SHARDRING_ENDPOINT_WAIT", default_value_t = shardring_crds::endpoint::DEFAULT_WAIT_SECONDS)]
    pub endpoint_wait: u64,
}

impl Default for EndpointArgs {
    fn default() -> Self {
        Self {
            endpoint_url: None,
            endpoint_token_file: client::DEFAULT_TOKEN_FILE.into(),
            endpoint_ca_file: client::DEFAULT_CA_FILE.into(),
            endpoint_wait: shardring_crds::endpoint::DEFAULT_WAIT_SECONDS,
        }
    }
}

impl EndpointArgs {
    /// The client configuration, `None` when no URL is set.
    pub fn config(&self) -> Option<EndpointConfig> {
        self.endpoint_url.as_ref().map(|url| EndpointConfig {
            token_file: self.endpoint_token_file.clone(),
            ca_file: self.endpoint_ca_file.clone(),
            ..EndpointConfig::new(url.clone())
        })
    }

    /// The long-poll wait.
    pub fn wait(&self) -> Duration {
        Duration::from_secs(self.endpoint_wait)
    }

    /// These flags as command-line arguments (none when no URL is set), for
    /// programs that start consumers (the demo, the tests).
    pub fn to_args(&self) -> Vec<OsString> {
        let Some(url) = &self.endpoint_url else {
            return Vec::new();
        };
        vec![
            "--endpoint-url".into(),
            url.into(),
            "--endpoint-token-file".into(),
            self.endpoint_token_file.clone().into(),
            "--endpoint-ca-file".into(),
            self.endpoint_ca_file.clone().into(),
            "--endpoint-wait".into(),
            self.endpoint_wait.to_string().into(),
        ]
    }
}

/// `<namespace>/<name>` or a bare name (in `default_namespace`) as
/// `(namespace, name)`.
pub fn split_group(shard_group: &str, default_namespace: &str) -> (String, String) {
    match shard_group.split_once('/') {
        Some((namespace, name)) => (namespace.to_owned(), name.to_owned()),
        None => (default_namespace.to_owned(), shard_group.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        endpoint: EndpointArgs,
    }

    #[test]
    fn the_command_line_round_trips() {
        let args = EndpointArgs {
            endpoint_url: Some("https://127.0.0.1:8443".into()),
            endpoint_token_file: "/t/token".into(),
            endpoint_ca_file: "/t/ca.crt".into(),
            endpoint_wait: 5,
        };
        let mut line: Vec<OsString> = vec!["consumer".into()];
        line.extend(args.to_args());
        assert_eq!(Cli::parse_from(line).endpoint, args);
        assert!(EndpointArgs::default().to_args().is_empty());
        assert_eq!(EndpointArgs::default().config().map(|c| c.url), None);
        let config = args.config().unwrap();
        assert_eq!(config.ca_file, PathBuf::from("/t/ca.crt"));
        assert_eq!(args.wait(), Duration::from_secs(5));
    }

    #[test]
    fn groups_split_into_namespace_and_name() {
        assert_eq!(
            split_group("prod/orders", "x"),
            ("prod".into(), "orders".into())
        );
        assert_eq!(
            split_group("orders", "default"),
            ("default".into(), "orders".into())
        );
    }
}
