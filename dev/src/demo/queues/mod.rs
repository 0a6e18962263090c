//! RabbitMQ partition queues for the demo and the e2e suite: the demo's
//! RabbitMQ [`act`] (its pods in `pods`), the [`producer`], and the reference consumer's command line in its RabbitMQ
//! mode ([`QueueConsumerSettings`]): the consumer endpoint beside a watch
//! of the assignment ConfigMap, the queue worker on the broker, a queue log
//! for the checker.

pub mod act;
mod pods;
pub mod producer;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::DemoError;
use super::consumers::{ConsumerProcess, common_args, start};

/// The RabbitMQ act's ShardGroup.
const GROUP: &str = "rabbitmq";
/// Messages unacknowledged per queue and consumer in the act.
const PREFETCH: u16 = 10;

/// The consumer endpoint as a queue consumer reaches it.
#[derive(Debug, Clone)]
pub struct QueueEndpoint {
    /// `https://host:port`.
    pub url: String,
    /// The only CA it trusts.
    pub ca_file: PathBuf,
    /// `<namespace>/<name>` of the ShardGroup.
    pub shard_group: String,
}

/// How every queue consumer process is started.
#[derive(Debug, Clone)]
pub struct QueueConsumerSettings {
    /// The reference consumer binary.
    pub binary: PathBuf,
    /// The broker: `amqp://user:password@host:port/<vhost>`.
    pub url: String,
    /// Most messages unacknowledged per queue.
    pub prefetch: u16,
    /// How long a SIGTERMed consumer waits for its revoke.
    pub drain_deadline: Duration,
    /// The endpoint (views long-polled, releases acknowledged).
    pub endpoint: QueueEndpoint,
    /// The kubeconfig a consumer watching a ConfigMap uses; `None`: it
    /// inherits the environment's.
    pub kubeconfig: Option<PathBuf>,
}

impl QueueConsumerSettings {
    /// The command line of pod `pod`'s consumer: its view from a watch of
    /// ConfigMap `config_map` in `namespace` and from the endpoint (with the
    /// token in `token_file`), messages logged to `log`.
    pub fn command(
        &self,
        pod: &str,
        (config_map, namespace): (&str, &str),
        token_file: &Path,
        log: &Path,
    ) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .args(["--pod", pod, "--rabbitmq-url", &self.url])
            .args(["--prefetch", &self.prefetch.to_string()])
            .args(["--endpoint-url", &self.endpoint.url])
            .arg("--endpoint-ca-file")
            .arg(&self.endpoint.ca_file)
            .arg("--endpoint-token-file")
            .arg(token_file)
            .args(["--shard-group", &self.endpoint.shard_group])
            .args(["--configmap", config_map, "--namespace", namespace]);
        common_args(
            &mut command,
            log,
            self.drain_deadline,
            self.kubeconfig.as_deref(),
        );
        command
    }

    /// Starts pod `pod`'s consumer ([`Self::command`]), its own output to
    /// `stderr_log`.
    pub fn spawn(
        &self,
        pod: &str,
        view: (&str, &str),
        token_file: &Path,
        log: &Path,
        stderr_log: &Path,
    ) -> Result<ConsumerProcess, DemoError> {
        start(pod, self.command(pod, view, token_file, log), stderr_log)
    }
}
