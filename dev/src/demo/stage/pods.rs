//! The stage's consumer pods: creating one starts its reference consumer;
//! a graceful deletion SIGTERMs it, a kill SIGKILLs it and force-deletes
//! the pod, and a hang SIGSTOPs it until it is resumed.

use jiff::Timestamp;

use super::super::cluster::NAMESPACE;
use super::super::consumers::ViewSource;
use super::super::{DemoError, SHARD_GROUP};
use super::Stage;

impl Stage {
    /// Creates pod `name` and starts its consumer.
    pub fn start_pod(&self, name: &str) -> Result<(), DemoError> {
        let mut state = self.state();
        let dir = state.cluster.pod_dir(name);
        std::fs::create_dir_all(&dir)?;
        let annotations = dir.join("annotations");
        // Kubelet creates the projected file before the container starts.
        std::fs::write(&annotations, b"")?;
        // A pod created again under its name (a StatefulSet's) is another
        // process: its records go to a log of their own, as another
        // owner's (its replay from the checkpoint is not a step back).
        let record_log = (0..)
            .map(|n| match n {
                0 => dir.join("records.jsonl"),
                n => dir.join(format!("records-{n}.jsonl")),
            })
            .find(|path| !path.exists())
            .expect("a free record log name");
        let shard_group = format!("{NAMESPACE}/{SHARD_GROUP}");
        let view = ViewSource::AnnotationsFile {
            path: &annotations,
            shard_group: &shard_group,
        };
        let process = self
            .settings
            .spawn(name, view, &record_log, &dir.join("consumer.log"))?;
        println!(
            "  + pod {name} created and Ready (consumer pid {})",
            process.pid()
        );
        state
            .cluster
            .add_pod(name, annotations, record_log, process, Timestamp::now());
        Ok(())
    }

    /// Deletes pod `name` gracefully (SIGTERM to its consumer).
    pub fn delete_pod(&self, name: &str) {
        let grace = self.grace;
        if self
            .state()
            .cluster
            .delete_pod(name, grace, Timestamp::now())
        {
            println!(
                "  - pod {name} deleted (grace period {} s): its consumer got SIGTERM and drains until revoked",
                grace.as_secs()
            );
        }
    }

    /// kill -9 of pod `name`'s consumer, then a force delete of the pod
    /// object (no grace period, no deletion timestamp ever seen).
    pub fn kill_pod(&self, name: &str) -> Result<(), DemoError> {
        if !self.state().cluster.force_delete(name) {
            return Err(DemoError::Consumer(format!("no pod {name} to kill")));
        }
        println!("  - pod {name}: consumer killed with SIGKILL, pod force-deleted");
        Ok(())
    }

    /// Pod `name`'s consumer hangs (SIGSTOP): it neither reads nor renews
    /// nor releases its leases until [`Self::resume_pod`].
    pub fn hang_pod(&self, name: &str) -> Result<(), DemoError> {
        if !self.state().cluster.signal(name, "STOP") {
            return Err(DemoError::Consumer(format!("no pod {name} to hang")));
        }
        println!("  ! pod {name}: consumer hung (SIGSTOP)");
        Ok(())
    }

    /// Pod `name`'s hung consumer carries on (SIGCONT).
    pub fn resume_pod(&self, name: &str) -> Result<(), DemoError> {
        if !self.state().cluster.signal(name, "CONT") {
            return Err(DemoError::Consumer(format!("no pod {name} to resume")));
        }
        println!("  ! pod {name}: consumer resumed (SIGCONT)");
        Ok(())
    }
}
