//! Pod annotation writes, coalesced per pod ([`PodWrites`]), and the bound
//! on those in flight ([`WriteLimit`]).
//!
//! Every ShardGroup annotates the pods it assigns under its own key, and
//! the groups of a pool reconcile at the same time after one pod event (a
//! pod that turns Ready takes shards of every group). One merge patch per
//! group and pod would make the API server process, store and watch-fan-out
//! one pod version per group; so writes to one pod go out one at a time,
//! and every key another reconcile asks for while a write to that pod is
//! in flight joins the next one: the pod's annotations for several groups
//! go out in one write whenever they change together, with no delay added
//! to a write that has nobody to wait for (a group commit, as databases
//! batch log flushes).
//!
//! A write carries the pod's uid as its precondition, so only writes for
//! the same uid are merged; a pod that is gone or was replaced answers
//! every key of the write alike (skipped), and a failure is every waiting
//! reconcile's failure (each retries as it would have).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};

use kube::api::{Api, Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::{Semaphore, oneshot};

use super::error::{ApplyError, replaced};
use super::names::MANAGER;
use crate::controller::cached_pod::CachedPod;
use crate::controller::metrics::ControllerMetrics;
use crate::controller::own_writes::OwnWrites;

/// One pod object: its namespace, name and uid (when known).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PodKey {
    namespace: String,
    name: String,
    uid: Option<String>,
}

/// The pod a write goes to: through `pods` (its namespace's API), by name
/// and, when known, conditioned on its uid.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) pods: &'a Api<CachedPod>,
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    pub(crate) uid: Option<&'a str>,
}

/// What a write to a pod did, for everyone whose key it carried.
type Outcome = Result<(), Arc<kube::Error>>;

/// Keys waiting for the next write to one pod, and who waits.
#[derive(Default)]
struct Batch {
    /// Annotation key → its new value (`None`: remove it).
    annotations: BTreeMap<String, Option<String>>,
    waiters: Vec<oneshot::Sender<Outcome>>,
}

/// The writes to pods in flight and the keys waiting for the next, shared
/// by every reconcile of one controller.
#[derive(Clone, Default)]
pub struct PodWrites {
    /// Per pod being written: the batch for its next write.
    pending: Arc<Mutex<HashMap<PodKey, Batch>>>,
}

impl std::fmt::Debug for PodWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodWrites")
            .field("pods", &self.pending.lock().len())
            .finish()
    }
}

impl PodWrites {
    /// Sets (`Some`) or removes (`None`) annotation `key` of pod `name`
    /// (uid `uid`, when known) through `pods`: in the write in flight's
    /// successor when one is in flight, else in a write of its own now.
    /// A pod gone or replaced is skipped (`Ok`).
    pub(crate) async fn write(
        &self,
        target: Target<'_>,
        key: &str,
        value: Option<String>,
        limit: &WriteLimit,
        metrics: &ControllerMetrics,
    ) -> Result<(), ApplyError> {
        let Target {
            pods,
            namespace,
            name,
            uid,
        } = target;
        let pod = PodKey {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.map(str::to_owned),
        };
        let waiting = {
            let mut pending = self.pending.lock();
            match pending.get_mut(&pod) {
                // A write is in flight: join the next one.
                Some(batch) => {
                    let (sender, receiver) = oneshot::channel();
                    batch.annotations.insert(key.to_owned(), value.clone());
                    batch.waiters.push(sender);
                    Some(receiver)
                }
                None => {
                    pending.insert(pod.clone(), Batch::default());
                    None
                }
            }
        };
        let outcome = match waiting {
            Some(receiver) => receiver.await.unwrap_or_else(|_| {
                // The writer was dropped (its reconcile ended at another
                // failure) before it wrote this key: a failure of this
                // reconcile too, which retries.
                Err(Arc::new(kube::Error::Service(
                    "the pod write this key waited for was abandoned".into(),
                )))
            }),
            None => {
                let first = BTreeMap::from([(key.to_owned(), value)]);
                self.flush(pods, &pod, first, Vec::new(), limit, metrics)
                    .await
            }
        };
        outcome.map_err(|source| ApplyError::Annotation {
            pod: name.to_owned(),
            source,
        })
    }

    /// Writes `annotations` to `pod`, answers `waiters`, then writes what
    /// joined meanwhile, until nothing did: the outcome of the first write.
    async fn flush(
        &self,
        pods: &Api<CachedPod>,
        pod: &PodKey,
        mut annotations: BTreeMap<String, Option<String>>,
        mut waiters: Vec<oneshot::Sender<Outcome>>,
        limit: &WriteLimit,
        metrics: &ControllerMetrics,
    ) -> Outcome {
        // Gives the pod back if this future is dropped mid-write (the keys
        // that joined fail, and their reconciles retry).
        let mut guard = Release {
            writes: self,
            pod: pod.clone(),
            armed: true,
        };
        let mut first = None;
        loop {
            let outcome = {
                let _permit = limit
                    .permits
                    .acquire()
                    .await
                    .expect("the write semaphore is never closed");
                patch(pods, pod, &annotations, limit).await
            };
            let removal = annotations.values().all(Option::is_none);
            metrics.write(if removal {
                "annotation_removal"
            } else {
                "annotation"
            });
            for waiter in waiters.drain(..) {
                let _ = waiter.send(outcome.clone());
            }
            first.get_or_insert(outcome);
            let mut pending = self.pending.lock();
            let next = pending.get_mut(pod).map(std::mem::take).unwrap_or_default();
            if next.waiters.is_empty() {
                pending.remove(pod);
                guard.armed = false;
                return first.unwrap_or(Ok(()));
            }
            (annotations, waiters) = (next.annotations, next.waiters);
        }
    }
}

/// Removes a pod's batch when its writer is dropped mid-write: the keys
/// waiting in it are answered with an error (their senders dropped) and
/// their reconciles retry.
struct Release<'a> {
    writes: &'a PodWrites,
    pod: PodKey,
    /// Cleared once the writer gave the pod back itself.
    armed: bool,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.writes.pending.lock().remove(&self.pod);
        }
    }
}

/// One merge patch of `annotations` on `pod`, conditioned on its uid; a
/// pod gone (404) or replaced ([`replaced`]) is skipped.
///
/// The write is announced to the pod watch before it is sent
/// ([`OwnWrites::begin`]): its echo can come through the watch before the
/// answer, and would otherwise wake every group of the pod for a reconcile
/// that decides nothing (at 20,000 shards a whole plan, after nearly every
/// publish on the real API server). An event of the pod held meanwhile that
/// is not the echo goes back to the pod trigger through `limit`'s
/// [`PodWakes`] when the write lands or fails.
async fn patch(
    pods: &Api<CachedPod>,
    pod: &PodKey,
    annotations: &BTreeMap<String, Option<String>>,
    limit: &WriteLimit,
) -> Outcome {
    let mut metadata = json!({ "annotations": annotations });
    if let Some(uid) = &pod.uid {
        metadata["uid"] = json!(uid);
    }
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    let wakes = limit.pod_wakes.clone();
    let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
    let flight = limit
        .own
        .begin::<CachedPod>(&pod.namespace, &pod.name, move || {
            wakes.wake(namespace, name);
        });
    match pods
        .patch(
            &pod.name,
            &params,
            &Patch::Merge(&json!({ "metadata": metadata })),
        )
        .await
    {
        Ok(written) => {
            flight.land(Some(&written));
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 || replaced(&status) => {
            tracing::debug!(pod = %pod.name, code = status.code, "pod gone or replaced before its annotation was written; skipped");
            flight.land::<CachedPod>(None);
            Ok(())
        }
        Err(source) => Err(Arc::new(source)),
    }
}

/// Where pod writes send the pods whose watch events they held and found
/// to be someone else's change ([`OwnWrites::begin`]): the runner feeds
/// them back into the pod trigger ([`PodWakes::channel`]), so their groups
/// wake as the held event would have woken them. Without a channel (a
/// context with no pod watch, which holds nothing) they go nowhere.
#[derive(Debug, Clone, Default)]
pub struct PodWakes(Option<UnboundedSender<(String, String)>>);

impl PodWakes {
    /// Wakes that arrive, as (namespace, name), at the receiver.
    pub fn channel() -> (Self, UnboundedReceiver<(String, String)>) {
        let (sender, receiver) = unbounded();
        (Self(Some(sender)), receiver)
    }

    fn wake(&self, namespace: String, name: String) {
        if let Some(sender) = &self.0 {
            // The receiver is gone only when the controller stopped.
            let _ = sender.unbounded_send((namespace, name));
        }
    }
}

/// The bound on pod writes in flight, shared by every reconcile of one
/// controller: thousands of annotations (a first publish, a rolling deploy)
/// go out concurrently but never as an unbounded burst. The API server's
/// priority and fairness answers an excess with 429 and `Retry-After`, which
/// the client honours (kube's default retry policy) before the write counts
/// as failed.
///
/// It also remembers the pod versions those writes produced
/// ([`OwnWrites`]), so the pod watch can tell their echoes from changes,
/// and coalesces the keys several reconciles write to one pod at once
/// ([`PodWrites`]).
#[derive(Debug, Clone)]
pub struct WriteLimit {
    permits: Arc<Semaphore>,
    pub(super) concurrency: usize,
    /// The versions the writes produced.
    pub own: OwnWrites,
    /// The pod writes in flight and the keys waiting for them.
    pub(super) pods: PodWrites,
    /// Where a write's held events that were not its echo go.
    pod_wakes: PodWakes,
}

impl WriteLimit {
    /// At most `concurrency` writes in flight (at least one); the pod
    /// events they hold that are not their echoes go to `pod_wakes`.
    pub fn new(concurrency: usize, pod_wakes: PodWakes) -> Self {
        let concurrency = concurrency.max(1);
        Self {
            permits: Arc::new(Semaphore::new(concurrency)),
            concurrency,
            own: OwnWrites::default(),
            pods: PodWrites::default(),
            pod_wakes,
        }
    }
}

impl Default for WriteLimit {
    /// [`DEFAULT_WRITE_CONCURRENCY`] writes in flight, and no pod watch
    /// to wake.
    fn default() -> Self {
        Self::new(DEFAULT_WRITE_CONCURRENCY, PodWakes::default())
    }
}

/// Pod writes in flight by default: the throughput of a 16-thread client,
/// well inside the API server's default priority-and-fairness share.
pub const DEFAULT_WRITE_CONCURRENCY: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::Client;
    use kube::client::Body;

    fn pod_json(version: &str) -> Vec<u8> {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": version},
        })
        .to_string()
        .into_bytes()
    }

    /// A task writing annotation `key` = `value` of pod `ns/p` (uid `u`).
    fn spawn_write(
        writes: &PodWrites,
        pods: &Api<CachedPod>,
        limit: &WriteLimit,
        metrics: &ControllerMetrics,
        key: &'static str,
        value: String,
    ) -> tokio::task::JoinHandle<Result<(), ApplyError>> {
        let (writes, pods, limit, metrics) =
            (writes.clone(), pods.clone(), limit.clone(), metrics.clone());
        tokio::spawn(async move {
            let target = Target {
                pods: &pods,
                namespace: "ns",
                name: "p",
                uid: Some("u"),
            };
            writes
                .write(target, key, Some(value), &limit, &metrics)
                .await
        })
    }

    /// A pod event that arrives while its annotation write is on its way is
    /// held: the write's own echo wakes nothing when the answer comes,
    /// anything else is sent back to the pod trigger (also when the write
    /// fails).
    #[tokio::test]
    async fn an_event_held_during_a_write_wakes_the_pod_only_when_it_was_not_the_echo() {
        use futures::StreamExt;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "ns");
        let pods: Api<CachedPod> = Api::namespaced(client, "ns");
        let (wakes, mut woken) = PodWakes::channel();
        let (writes, limit, metrics) = (
            PodWrites::default(),
            WriteLimit::new(4, wakes),
            ControllerMetrics::default(),
        );
        let cached = |version: &str| CachedPod {
            metadata: kube::api::ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("p".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let write = || spawn_write(&writes, &pods, &limit, &metrics, "k", "v".into());
        // The echo beats the answer: held, then spent.
        let task = write();
        let (_, send) = handle.next_request().await.expect("the write");
        assert!(limit.own.holds_while_in_flight(&cached("2")));
        send.send_response(Response::new(Body::from(pod_json("2"))));
        task.await.expect("the task").expect("written");
        // Someone else's change beats the answer: held, then woken for.
        let task = write();
        let (_, send) = handle.next_request().await.expect("the write");
        assert!(limit.own.holds_while_in_flight(&cached("3")));
        send.send_response(Response::new(Body::from(pod_json("4"))));
        task.await.expect("the task").expect("written");
        assert_eq!(
            woken.next().await,
            Some(("ns".to_owned(), "p".to_owned())),
            "version 3 was not the write's echo"
        );
        // A failed write wakes for what it held.
        let task = write();
        let (_, send) = handle.next_request().await.expect("the write");
        assert!(limit.own.holds_while_in_flight(&cached("5")));
        send.send_error(std::io::Error::other("connection reset"));
        assert!(task.await.expect("the task").is_err());
        assert_eq!(woken.next().await, Some(("ns".to_owned(), "p".to_owned())));
        // Nothing is held once no write is on its way, and nothing else was
        // woken: the first write's echo was spent.
        assert!(!limit.own.holds_while_in_flight(&cached("6")));
        drop((writes, limit));
        assert_eq!(woken.next().await, None);
    }

    /// Keys asked for while a write to the pod is in flight go out in one
    /// write after it; every caller learns its outcome.
    #[tokio::test]
    async fn keys_written_meanwhile_join_one_write() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "ns");
        let pods: Api<CachedPod> = Api::namespaced(client, "ns");
        let (writes, limit, metrics) = (
            PodWrites::default(),
            WriteLimit::new(4, PodWakes::default()),
            ControllerMetrics::default(),
        );
        let write = |key: &'static str| {
            let value = format!("{{\"epoch\":1,\"k\":\"{key}\"}}");
            spawn_write(&writes, &pods, &limit, &metrics, key, value)
        };
        let body = |request: Request<Body>| async move {
            let bytes = request.into_body().collect_bytes().await.expect("a body");
            serde_json::from_slice::<serde_json::Value>(&bytes).expect("JSON")
        };
        let a = write("assignment.shardring.io/a");
        let (first, send) = handle.next_request().await.expect("the first write");
        let first = body(first).await;
        assert_eq!(first["metadata"]["uid"], "u");
        assert_eq!(
            first["metadata"]["annotations"]
                .as_object()
                .map(|m| m.len()),
            Some(1)
        );
        // While it is in flight, two more groups write their keys.
        let (b, c) = (
            write("assignment.shardring.io/b"),
            write("assignment.shardring.io/c"),
        );
        while writes
            .pending
            .lock()
            .get(&PodKey {
                namespace: "ns".into(),
                name: "p".into(),
                uid: Some("u".into()),
            })
            .is_none_or(|batch| batch.waiters.len() < 2)
        {
            tokio::task::yield_now().await;
        }
        send.send_response(Response::new(Body::from(pod_json("2"))));
        let (second, send) = handle.next_request().await.expect("the joined write");
        let second = body(second).await;
        let keys: Vec<&String> = second["metadata"]["annotations"]
            .as_object()
            .expect("annotations")
            .keys()
            .collect();
        assert_eq!(
            keys,
            ["assignment.shardring.io/b", "assignment.shardring.io/c"]
        );
        send.send_response(Response::new(Body::from(pod_json("3"))));
        for task in [a, b, c] {
            task.await.expect("the task").expect("written");
        }
        assert!(writes.pending.lock().is_empty());
    }
}
