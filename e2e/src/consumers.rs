//! The scenario's consumer pods: each is a Pod object the scheduler never
//! binds (a scheduling gate) that the harness marks Running and Ready through
//! the status subresource, as a kubelet would, backed by a local
//! `shardring-reference-consumer` process that knows its pod name and reads
//! its view by watching the assignment ConfigMap through the API (the same
//! KUBECONFIG): of Kinesis shards with KCL leases, or of RabbitMQ queues,
//! then also from the consumer endpoint with a token bound to its pod. Like a kubelet, the harness reports the container `running`
//! while the process runs: the operator takes a pod that never reported a
//! started container (and is not bound to a node) for one that never ran,
//! and would hand its shards over at once. A finalizer keeps a deleted pod
//! visible as terminating, so the operator sees a graceful deletion exactly
//! as on a node: the harness then sends SIGTERM, the consumer drains until
//! revoked and exits, the harness reports the container `terminated`, and
//! only then does it drop the finalizer (the kubelet's deletion
//! confirmation) and the pod disappears. kill -9 with a force deletion
//! removes the pod without that last status.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use shardring_consumer::check::{self, ProcessedRecord};
use shardring_crds::ShardGroup;
use shardring_crds::endpoint::DEFAULT_AUDIENCE;
use shardring_dev::demo::consumers::{ConsumerProcess, ConsumerSettings, ViewSource};
use shardring_dev::demo::queues::QueueConsumerSettings;

use crate::tokens::pod_token;

use crate::error::HarnessError;
use crate::settings::{CONFIG_MAP, DRAIN_TIMEOUT, NAME, STEP_TIMEOUT};
use shardring_devkit::wait::{Probe, wait_for};

/// Keeps a deleted pod terminating until its consumer process has exited.
pub const FINALIZER: &str = "e2e.shardring.io/process-running";
/// Keeps every pod unscheduled.
pub const SCHEDULING_GATE: &str = "shardring.io/e2e-never-schedule";

/// The conditions of a Running pod that became Ready at `since` (RFC 3339),
/// as a kubelet reports them.
pub fn ready_conditions(since: &str) -> serde_json::Value {
    json!([
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": since},
        {"type": "Initialized", "status": "True", "lastTransitionTime": since},
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": since},
        {"type": "Ready", "status": "True", "lastTransitionTime": since}
    ])
}

/// What the consumer processes read, and their command lines (shared with
/// `shardring-dev demo`).
#[derive(Debug, Clone)]
pub enum ConsumerCommand {
    /// Kinesis shards with KCL leases.
    Shards(ConsumerSettings),
    /// RabbitMQ queues, through the consumer endpoint too.
    Queues(QueueConsumerSettings),
}

/// How consumer processes are started.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// The reference consumer's command line.
    pub command: ConsumerCommand,
    /// Namespace of the pods and the ConfigMap.
    pub namespace: String,
    /// Record logs and consumer logs go here.
    pub dir: PathBuf,
}

/// The live pods and every record log ever written.
pub struct Pods {
    client: Client,
    spec: ConsumerSpec,
    live: BTreeMap<String, ConsumerProcess>,
    /// Consumers of terminating pods: draining after SIGTERM
    /// ([`Pods::delete_start`]) or SIGSTOPped ([`Pods::hang_and_delete`]).
    leaving: BTreeMap<String, ConsumerProcess>,
    logs: Vec<PathBuf>,
}

impl Pods {
    /// No pods yet.
    pub fn new(client: Client, spec: ConsumerSpec) -> Self {
        Self {
            client,
            spec,
            live: BTreeMap::new(),
            leaving: BTreeMap::new(),
            logs: Vec::new(),
        }
    }

    fn api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.spec.namespace)
    }

    fn record_log(&self, pod: &str) -> PathBuf {
        self.spec.dir.join(format!("{pod}.records.jsonl"))
    }

    fn token_file(&self, pod: &str) -> PathBuf {
        self.spec.dir.join(format!("{pod}.token"))
    }

    /// Every log the consumers were given, in the order they started.
    pub fn logs(&self) -> &[PathBuf] {
        &self.logs
    }

    /// Names of the pods whose process runs, sorted.
    pub fn live(&self) -> Vec<String> {
        self.live.keys().cloned().collect()
    }

    /// Whether `pod` has logged a processed record.
    pub fn has_read(&self, pod: &str) -> bool {
        std::fs::metadata(self.record_log(pod)).is_ok_and(|m| m.len() > 0)
    }

    /// Fails when a live pod's consumer exited although nobody stopped it.
    pub fn check_alive(&mut self) -> Result<(), HarnessError> {
        for (name, process) in &mut self.live {
            if let Some(status) = process.exited() {
                return Err(HarnessError::Consumer(format!(
                    "the consumer of {name} exited unasked ({status}); see {}",
                    self.spec.dir.join(format!("{name}.consumer.log")).display()
                )));
            }
        }
        Ok(())
    }

    /// Creates pods `names`, starts their consumers and then marks them all
    /// Ready at one moment (one `lastTransitionTime`), as pods started
    /// together are: they pass the pool's `minReadySeconds` together, and
    /// the first publish of a group waits for each of them.
    pub async fn add(&mut self, names: &[&str]) -> Result<(), HarnessError> {
        let api = self.api();
        for name in names {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app": NAME}, "finalizers": [FINALIZER]},
                "spec": {
                    "schedulingGates": [{"name": SCHEDULING_GATE}],
                    "terminationGracePeriodSeconds": DRAIN_TIMEOUT.as_secs() + 5,
                    "containers": [{"name": "consumer", "image": "registry.k8s.io/pause:3.10"}]
                }
            }))?;
            api.create(&PostParams::default(), &pod).await?;
        }
        if matches!(self.spec.command, ConsumerCommand::Queues(_)) {
            // As a kubelet writes a projected token before the container starts.
            for name in names {
                let token = pod_token(&self.client, &self.spec.namespace, name, DEFAULT_AUDIENCE)
                    .await
                    .map_err(|e| HarnessError::Consumer(format!("a token for {name}: {e}")))?;
                std::fs::write(self.token_file(name), token)?;
            }
        }
        // The processes start first; then the status reports them running.
        let mut started = Vec::with_capacity(names.len());
        for name in names {
            started.push((*name, self.spawn(name)?));
        }
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let status = json!({"status": {
            "phase": "Running",
            "conditions": ready_conditions(&now),
            "containerStatuses": [container_status(json!({"running": {"startedAt": now}}), true)]
        }});
        // All at once: the later a pod's Ready lands, the more likely the
        // others passed minReadySeconds (and were published) without it.
        let (params, patch) = (PatchParams::default(), Patch::Merge(&status));
        let patches = started
            .iter()
            .map(|(name, _)| api.patch_status(name, &params, &patch));
        for patched in futures::future::join_all(patches).await {
            patched?;
        }
        for (name, process) in started {
            eprintln!("e2e: + pod {name} Ready (consumer pid {})", process.pid());
            self.live.insert(name.to_owned(), process);
        }
        Ok(())
    }

    fn spawn(&mut self, pod: &str) -> Result<ConsumerProcess, HarnessError> {
        let spec = &self.spec;
        let log = self.record_log(pod);
        let view = ViewSource::ConfigMap {
            name: CONFIG_MAP,
            namespace: &spec.namespace,
        };
        let stderr_log = spec.dir.join(format!("{pod}.consumer.log"));
        let process = match &spec.command {
            ConsumerCommand::Shards(settings) => settings.spawn(pod, view, &log, &stderr_log),
            ConsumerCommand::Queues(settings) => settings.spawn(
                pod,
                (CONFIG_MAP, &spec.namespace),
                &self.token_file(pod),
                &log,
                &stderr_log,
            ),
        }
        .map_err(|e| HarnessError::Consumer(e.to_string()))?;
        self.logs.push(log);
        Ok(process)
    }

    /// [`Self::add`], then waits until the group counts every live pod
    /// eligible (past the pool's `minReadySeconds`).
    pub async fn add_eligible(&mut self, names: &[&str]) -> Result<(), HarnessError> {
        self.add(names).await?;
        let live = self.live.len() as u64;
        wait_eligible(&self.client, &self.spec.namespace, live, names).await
    }

    /// Graceful deletion, in a kubelet's order: the pod gets its deletion
    /// timestamp (the finalizer keeps it), the consumer gets SIGTERM, drains
    /// until revoked and exits; then the finalizer goes and the pod with it.
    pub async fn delete_gracefully(&mut self, name: &str) -> Result<(), HarnessError> {
        self.delete_start(name).await?;
        self.delete_finish(name).await
    }

    /// Graceful deletion of several pods at once, as a scale-down deletes
    /// them: every pod gets its deletion timestamp and its consumer SIGTERM
    /// before any is waited for.
    pub async fn delete_gracefully_together(&mut self, names: &[&str]) -> Result<(), HarnessError> {
        for name in names {
            self.delete_start(name).await?;
        }
        for name in names {
            self.delete_finish(name).await?;
        }
        Ok(())
    }

    /// The first half of a graceful deletion: the pod gets its deletion
    /// timestamp (the finalizer keeps it, terminating) and its consumer
    /// SIGTERM; [`Self::delete_finish`] waits for the rest.
    pub async fn delete_start(&mut self, name: &str) -> Result<(), HarnessError> {
        self.api().delete(name, &DeleteParams::default()).await?;
        let process = self
            .live
            .remove(name)
            .ok_or_else(|| HarnessError::Consumer(format!("no live pod {name}")))?;
        process.terminate();
        self.leaving.insert(name.to_owned(), process);
        Ok(())
    }

    /// The consumer of a hung pod being deleted ([`Self::hang_and_delete`])
    /// gets SIGCONT and drains as after [`Self::delete_start`]; then
    /// [`Self::delete_finish`].
    pub async fn resume_and_drain(&mut self, name: &str) -> Result<(), HarnessError> {
        let process = self
            .leaving
            .get(name)
            .ok_or_else(|| HarnessError::Consumer(format!("no hung pod {name}")))?;
        process.signal("CONT");
        self.delete_finish(name).await
    }

    /// Waits until the consumer of `name` (see [`Self::delete_start`]) has
    /// drained and exited, without the API.
    pub async fn wait_exited(&mut self, name: &str) -> Result<ExitStatus, HarnessError> {
        let process = self
            .leaving
            .get_mut(name)
            .ok_or_else(|| HarnessError::Consumer(format!("no leaving pod {name}")))?;
        process.terminate();
        let status = wait_for(
            &format!("the consumer of {name} to drain and exit"),
            STEP_TIMEOUT,
            || {
                let exited = process.exited();
                async move {
                    Ok::<_, HarnessError>(match exited {
                        Some(status) => Probe::Done(status),
                        None => Probe::Pending("still running".into()),
                    })
                }
            },
        )
        .await?;
        eprintln!("e2e: - pod {name}: consumer exited ({status}) after SIGTERM");
        Ok(status)
    }

    /// The second half of a graceful deletion: the consumer's exit (SIGTERM
    /// again, harmless), then the kubelet's last steps: container
    /// terminated, finalizer gone, pod gone.
    pub async fn delete_finish(&mut self, name: &str) -> Result<(), HarnessError> {
        let status = self.wait_exited(name).await?;
        self.leaving.remove(name);
        self.report_terminated(name, status.code().unwrap_or(137))
            .await?;
        self.remove_finalizer(name).await?;
        self.wait_gone(name).await
    }

    /// What a kubelet reports once a deleted pod's container stopped, before
    /// it confirms the deletion: the container `terminated`, not ready.
    async fn report_terminated(&self, name: &str, exit_code: i32) -> Result<(), HarnessError> {
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let terminated = json!({"terminated": {
            "exitCode": exit_code, "reason": if exit_code == 0 { "Completed" } else { "Error" },
            "finishedAt": now
        }});
        let status = json!({"status": {
            "conditions": [
                {"type": "ContainersReady", "status": "False", "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "lastTransitionTime": now}
            ],
            "containerStatuses": [container_status(terminated, false)]
        }});
        match self
            .api()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// kill -9 of the consumer, then a force delete of its pod.
    pub async fn kill_and_force_delete(&mut self, name: &str) -> Result<(), HarnessError> {
        if let Some(mut process) = self.live.remove(name) {
            process.kill();
            let _ = process.wait();
        }
        eprintln!("e2e: - pod {name}: consumer killed with SIGKILL, pod force-deleted");
        self.remove_finalizer(name).await?;
        match self
            .api()
            .delete(name, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
        self.wait_gone(name).await
    }

    /// A hung consumer on a pod being deleted: SIGSTOP to the process (it
    /// neither reads nor renews nor releases), then the pod is deleted and
    /// stays terminating (the finalizer): its shards are revoked, and the
    /// handoff waits until [`Self::resume_and_drain`] lets the consumer go on.
    pub async fn hang_and_delete(&mut self, name: &str) -> Result<(), HarnessError> {
        let process = self
            .live
            .remove(name)
            .ok_or_else(|| HarnessError::Consumer(format!("no live pod {name}")))?;
        let stopped = Command::new("kill")
            .args(["-STOP", &process.pid().to_string()])
            .stdin(Stdio::null())
            .status()?;
        if !stopped.success() {
            return Err(HarnessError::Consumer(format!(
                "SIGSTOP to the consumer of {name} failed ({stopped})"
            )));
        }
        self.leaving.insert(name.to_owned(), process);
        self.api().delete(name, &DeleteParams::default()).await?;
        eprintln!("e2e: ~ pod {name}: consumer stopped (SIGSTOP), pod deleted and terminating");
        Ok(())
    }

    async fn remove_finalizer(&self, name: &str) -> Result<(), HarnessError> {
        let patch = json!({"metadata": {"finalizers": null}});
        match self
            .api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    async fn wait_gone(&self, name: &str) -> Result<(), HarnessError> {
        let api = self.api();
        wait_for(&format!("pod {name} to be gone"), STEP_TIMEOUT, || {
            let api = api.clone();
            async move {
                Ok::<_, HarnessError>(match api.get_opt(name).await? {
                    None => Probe::Done(()),
                    Some(_) => Probe::Pending("still present".into()),
                })
            }
        })
        .await?;
        Ok(())
    }

    /// Kills every consumer and drops the finalizers (cleanup).
    pub async fn kill_all(&mut self) {
        let mut processes = std::mem::take(&mut self.live);
        processes.append(&mut self.leaving);
        let names: Vec<String> = processes.keys().cloned().collect();
        for (_, mut process) in processes {
            process.kill();
            let _ = process.wait();
        }
        for name in names {
            let _ = self.remove_finalizer(&name).await;
        }
    }

    /// Every whole line of every record log written so far (a consumer
    /// killed mid-write may leave a torn last line; its record then counts
    /// as not processed).
    pub fn processed(&self) -> Result<Vec<ProcessedRecord>, HarnessError> {
        let mut processed = Vec::new();
        for path in &self.logs {
            let text = match std::fs::read_to_string(path) {
                Ok(text) => text,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error.into()),
            };
            let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
            processed.extend(check::parse_log(whole).map_err(|e| HarnessError::Log {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?);
        }
        Ok(processed)
    }
}

/// The consumer container's status in `state`, as a kubelet reports it
/// (the fields the API requires, the image of the pod spec).
fn container_status(state: serde_json::Value, ready: bool) -> serde_json::Value {
    json!({
        "name": "consumer",
        "image": "registry.k8s.io/pause:3.10",
        "imageID": "",
        "ready": ready,
        "restartCount": 0,
        "started": ready,
        "state": state
    })
}

/// Waits until ShardGroup [`NAME`] in `namespace` counts `live` pods
/// eligible (after adding `names`).
pub(crate) async fn wait_eligible(
    client: &Client,
    namespace: &str,
    live: u64,
    names: &[&str],
) -> Result<(), HarnessError> {
    let groups = Api::<ShardGroup>::namespaced(client.clone(), namespace);
    wait_for(
        &format!("{live} pods eligible (after adding {names:?})"),
        STEP_TIMEOUT,
        || async {
            let eligible = groups
                .get(NAME)
                .await?
                .status
                .map_or(0, |s| s.pods.eligible);
            Ok::<_, HarnessError>(if eligible >= live {
                Probe::Done(())
            } else {
                Probe::Pending(format!("{eligible} eligible"))
            })
        },
    )
    .await?;
    Ok(())
}
