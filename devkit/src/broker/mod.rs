//! A RabbitMQ broker of its own for a test, the e2e suite or the demo:
//! Debian's `rabbitmq-server` (3.10, with the management plugin) started
//! as a child on free loopback ports with its own node name, its own epmd,
//! and its mnesia, log and config under a temporary directory, so it is
//! independent of any system instance and of other tests' brokers. It is
//! ready when its management API answers; it is stopped by pid (SIGTERM,
//! which the Erlang VM takes as a graceful shutdown), restarted on the same
//! data (durable queues and persistent messages survive), and killed with
//! its epmd when dropped. Its directory lists both pids, each with a string
//! its command line holds (`pids`), so a CI step that always runs can stop
//! what a killed test process left behind (`.ci/run`'s exit trap). [`admin`] creates vhosts, users and queues
//! through the management API.
//!
//! Without `rabbitmq-server` installed, [`Broker::installed`] is `None`:
//! tests print `SKIPPED` and pass, unless `SHARDRING_REQUIRE_TOOLS=1`
//! (CI) makes them fail ([`Broker::start_or_skip`]).

pub mod admin;
mod error;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use admin::Admin;
pub use error::{BrokerError, SERVER_ENV};

use crate::emulators::{free_port, log_tail};

/// The start script of Debian's package (it runs the node in the
/// foreground as the calling user; `/usr/sbin/rabbitmq-server` would
/// switch to the `rabbitmq` user).
const DEBIAN_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// How long a start or a stop may take.
const START_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// The management user every broker here has (the broker's default,
/// allowed from loopback only).
pub const ADMIN_USER: &str = "guest";
/// Its password.
pub const ADMIN_PASSWORD: &str = "guest";

/// The ports of one broker, all on 127.0.0.1.
#[derive(Debug, Clone, Copy)]
pub struct BrokerPorts {
    /// AMQP 0-9-1.
    pub amqp: u16,
    /// The management plugin's HTTP API.
    pub management: u16,
    /// Erlang distribution.
    pub dist: u16,
    /// This broker's own epmd.
    pub epmd: u16,
}

/// A running (or stopped, between [`Broker::stop`] and [`Broker::start_again`]) broker.
#[derive(Debug)]
pub struct Broker {
    script: PathBuf,
    dir: PathBuf,
    node: String,
    ports: BrokerPorts,
    epmd: Child,
    server: Option<Child>,
}

impl Broker {
    /// The start script, when `rabbitmq-server` is installed:
    /// `SHARDRING_RABBITMQ_SERVER`, else Debian's.
    pub fn installed() -> Option<PathBuf> {
        let script = std::env::var_os(SERVER_ENV)
            .map_or_else(|| PathBuf::from(DEBIAN_SERVER), PathBuf::from);
        script.is_file().then_some(script)
    }

    /// Starts a broker, or `None` after printing `SKIPPED: <what> needs
    /// rabbitmq-server ...` when it is not installed; with
    /// `SHARDRING_REQUIRE_TOOLS=1` a missing broker panics instead (CI
    /// installs it, so a skip there would hide a broken setup).
    pub async fn start_or_skip(what: &str) -> Option<Self> {
        if Self::installed().is_none() {
            let required = std::env::var("SHARDRING_REQUIRE_TOOLS").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "{what} needs rabbitmq-server and SHARDRING_REQUIRE_TOOLS=1 says it must run: {}",
                BrokerError::NotInstalled
            );
            println!(
                "SKIPPED: {what} needs rabbitmq-server ({})",
                BrokerError::NotInstalled
            );
            return None;
        }
        match Self::start().await {
            Ok(broker) => Some(broker),
            Err(error) => panic!("{what}: starting a RabbitMQ broker failed: {error}"),
        }
    }

    /// Starts a fresh broker and waits until its management API answers,
    /// on new ports when one it was given was taken between picking and
    /// binding (the node then exits while starting): three tries.
    pub async fn start() -> Result<Self, BrokerError> {
        let script = Self::installed().ok_or(BrokerError::NotInstalled)?;
        let mut failed = None;
        for _ in 0..3 {
            match Self::start_once(&script).await {
                Ok(broker) => return Ok(broker),
                Err(error @ BrokerError::NotInstalled) => return Err(error),
                Err(error) => failed = Some(error),
            }
        }
        Err(failed.expect("three tries made"))
    }

    /// [`Self::start`] on ports picked now.
    async fn start_once(script: &Path) -> Result<Self, BrokerError> {
        let script = script.to_path_buf();
        let ports = BrokerPorts {
            amqp: free_port()?,
            management: free_port()?,
            dist: free_port()?,
            epmd: free_port()?,
        };
        let node = format!("shardring-{}@localhost", ports.amqp);
        let dir = std::env::temp_dir().join(format!("shardring-rabbitmq-{}", ports.amqp));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        for sub in ["mnesia", "log", "plugins"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        std::fs::write(dir.join("enabled_plugins"), "[rabbitmq_management].\n")?;
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.default = 127.0.0.1:{amqp}\n\
                 management.tcp.ip = 127.0.0.1\n\
                 management.tcp.port = {management}\n\
                 # queue statistics every half second (the default is 5 s)\n\
                 collect_statistics_interval = 500\n",
                amqp = ports.amqp,
                management = ports.management,
            ),
        )?;
        // Its own epmd on its own port, a child of ours: the node's
        // `epmd -daemon` finds the port taken and leaves it to this one,
        // so nothing outlives the broker.
        let epmd = Command::new("epmd")
            .args(["-port", &ports.epmd.to_string(), "-address", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(dir.join("epmd.log"))?)
            .spawn()?;
        let mut broker = Self {
            script,
            dir,
            node,
            ports,
            epmd,
            server: None,
        };
        broker.start_again().await?;
        Ok(broker)
    }

    /// Writes `pids`: each live process of this broker, with a string its
    /// command line holds (epmd's port; the node's directory, which its
    /// code path names).
    fn record_pids(&self) -> std::io::Result<()> {
        let mut lines = format!("{} -port {}\n", self.epmd.id(), self.ports.epmd);
        if let Some(server) = &self.server {
            lines.push_str(&format!("{} {}\n", server.id(), self.dir.display()));
        }
        std::fs::write(self.dir.join("pids"), lines)
    }

    /// Starts the node (again, after [`Self::stop`]) on the same data and
    /// waits until its management API answers.
    pub async fn start_again(&mut self) -> Result<Duration, BrokerError> {
        let started = Instant::now();
        let out = File::create(self.dir.join("server.log"))?;
        let err = out.try_clone()?;
        let dir = &self.dir;
        let server = Command::new(&self.script)
            .env("HOME", dir)
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.ports.amqp.to_string())
            .env("RABBITMQ_DIST_PORT", self.ports.dist.to_string())
            .env("ERL_EPMD_PORT", self.ports.epmd.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", dir.join("plugins"))
            // The script then execs the Erlang VM itself (so this child's
            // pid is the node's, and SIGTERM reaches it), with no shell
            // reading stdin.
            .env("RABBITMQ_ALLOW_INPUT", "true")
            .env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "-noinput")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()?;
        self.server = Some(server);
        self.record_pids()?;
        let admin = self.admin();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self
                .server
                .as_mut()
                .and_then(|s| s.try_wait().ok().flatten())
            {
                return Err(self.failure(format!("exited with {status} while starting")));
            }
            if admin.overview().await.is_ok() && self.listens_on_its_ports() {
                return Ok(started.elapsed());
            }
            if Instant::now() >= deadline {
                return Err(self.failure(format!(
                    "the management API on port {} did not answer within {START_TIMEOUT:?}",
                    self.ports.management
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether the node itself listens on its AMQP and management ports:
    /// another test's broker may have taken one between picking and binding,
    /// and would answer the management API with the same default user.
    /// Where `/proc` cannot be read, the answer of the management API is
    /// the best available sign.
    fn listens_on_its_ports(&self) -> bool {
        let Some(pid) = self.pid() else {
            return false;
        };
        [self.ports.amqp, self.ports.management]
            .into_iter()
            .all(|port| crate::listening::process_listens_on(pid, port).unwrap_or(true))
    }

    /// Stops the node gracefully (SIGTERM to its pid) and waits for it to
    /// exit; its data stays for [`Self::start_again`]. Returns how long it took.
    pub async fn stop(&mut self) -> Result<Duration, BrokerError> {
        let started = Instant::now();
        let Some(mut server) = self.server.take() else {
            return Ok(Duration::ZERO);
        };
        signal(server.id(), "TERM");
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if server.try_wait()?.is_some() {
                return Ok(started.elapsed());
            }
            if Instant::now() >= deadline {
                let _ = server.kill();
                let _ = server.wait();
                return Err(self.failure(format!(
                    "did not stop within {STOP_TIMEOUT:?} of SIGTERM (killed)"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The ports it listens on.
    pub fn ports(&self) -> BrokerPorts {
        self.ports
    }

    /// Its node name (`shardring-<amqp port>@localhost`).
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The node's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(Child::id)
    }

    /// `http://127.0.0.1:<management port>`.
    pub fn management_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.management)
    }

    /// `amqp://<user>:<password>@127.0.0.1:<port>/<vhost>` (the vhost
    /// percent-encoded).
    pub fn amqp_url(&self, user: &str, password: &str, vhost: &str) -> String {
        format!(
            "amqp://{user}:{password}@127.0.0.1:{}/{}",
            self.ports.amqp,
            admin::encode_segment(vhost)
        )
    }

    /// The management API as the admin user.
    pub fn admin(&self) -> Admin {
        Admin::new(&self.management_url(), ADMIN_USER, ADMIN_PASSWORD)
    }

    /// Where its files are (mnesia, logs, config).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn failure(&self, detail: String) -> BrokerError {
        let log = self.dir.join("server.log");
        BrokerError::Process {
            node: self.node.clone(),
            detail: format!("{detail}; {}:\n{}", log.display(), log_tail(&log)),
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // Our own children, by pid: the node (the VM itself, not a shell,
        // so nothing is orphaned) and its epmd. The files stay only when
        // asked to (SHARDRING_KEEP_BROKER_FILES), for a look after a failure.
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = self.epmd.kill();
        let _ = self.epmd.wait();
        if std::env::var_os("SHARDRING_KEEP_BROKER_FILES").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Sends signal `name` to `pid` (std can only SIGKILL; `kill` is in every
/// POSIX userland).
fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
