//! Two replicas electing against one in-memory Lease store that enforces
//! optimistic concurrency like the API server (a write carrying a stale
//! `resourceVersion` gets 409). Simulated time (tokio paused) drives both
//! election loops: exactly one replica leads at any instant, a clean
//! shutdown hands over within one retry period, and a crashed leader is
//! replaced only after its Lease expired.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::client::Body;
use serde_json::{Value, json};
use shardring::clock::Clock;
use shardring::runtime::leader::{LeaderConfig, LeaderElector, LeaderHandle};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower_test::mock;

/// Wall clock that follows tokio's (paused) clock.
#[derive(Debug)]
struct SimClock {
    base: Timestamp,
    start: Instant,
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.start.elapsed()).unwrap();
        self.base.checked_add(elapsed).unwrap()
    }
}

/// The one Lease, with the API server's resourceVersion rule.
#[derive(Default)]
struct Store {
    lease: Option<Value>,
    version: u64,
}

fn reply(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn failure(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
           "code": code, "message": reason})
}

async fn handle_request(store: &Mutex<Store>, request: Request<Body>) -> Response<Body> {
    let method = request.method().clone();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let mut store = store.lock();
    let version = store.version;
    match method {
        Method::GET => match &store.lease {
            Some(lease) => reply(200, lease),
            None => reply(404, &failure(404, "NotFound")),
        },
        Method::POST if store.lease.is_some() => reply(409, &failure(409, "AlreadyExists")),
        Method::PUT | Method::POST => {
            let mut lease: Value = serde_json::from_slice(&bytes).unwrap();
            if method == Method::PUT {
                let sent = lease["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                if sent != version.to_string() {
                    return reply(409, &failure(409, "Conflict"));
                }
            }
            store.version += 1;
            lease["metadata"]["resourceVersion"] = json!(store.version.to_string());
            store.lease = Some(lease.clone());
            reply(200, &lease)
        }
        other => panic!("unexpected {other}"),
    }
}

/// A client whose requests are served from `store`.
fn client(store: Arc<Mutex<Store>>) -> kube::Client {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            send.send_response(handle_request(&store, request).await);
        }
    });
    kube::Client::new(service, "default")
}

fn replica(
    store: &Arc<Mutex<Store>>,
    clock: &Arc<SimClock>,
    identity: &str,
) -> (LeaderHandle, CancellationToken) {
    let token = CancellationToken::new();
    let config = LeaderConfig::new("shardring-leader", "shardring-system", identity);
    let handle = LeaderElector::new(client(store.clone()), config)
        .with_clock(clock.clone())
        .spawn(token.clone());
    (handle, token)
}

/// Fails the test if both replicas ever report leadership at once.
fn watch_exclusive(
    a: watch::Receiver<bool>,
    b: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (mut a, mut b) = (a, b);
        loop {
            assert!(
                !(*a.borrow_and_update() && *b.borrow_and_update()),
                "two leaders"
            );
            tokio::select! {
                r = a.changed() => if r.is_err() { return },
                r = b.changed() => if r.is_err() { return },
            }
        }
    })
}

async fn wait_for(rx: &mut watch::Receiver<bool>, value: bool) {
    rx.wait_for(|v| *v == value).await.unwrap();
}

fn holder(store: &Mutex<Store>) -> Option<String> {
    let store = store.lock();
    store.lease.as_ref()?["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(start_paused = true)]
async fn one_leader_and_a_fast_handover_on_clean_shutdown() {
    let store = Arc::new(Mutex::new(Store::default()));
    let clock = Arc::new(SimClock {
        base: Timestamp::from_second(1_800_000_000).unwrap(),
        start: Instant::now(),
    });
    let (a, a_stop) = replica(&store, &clock, "pod-a");
    let (b, b_stop) = replica(&store, &clock, "pod-b");
    let exclusive = watch_exclusive(a.is_leader.clone(), b.is_leader.clone());

    // Both race to create the Lease; exactly one wins and keeps it.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (leader, mut standby, leader_stop) = match holder(&store).as_deref() {
        Some("pod-a") => (a, b, a_stop.clone()),
        Some("pod-b") => (b, a, b_stop.clone()),
        other => panic!("no holder: {other:?}"),
    };
    assert!(*leader.is_leader.borrow());
    assert!(!*standby.is_leader.borrow());

    // Clean shutdown releases; the standby takes over within a retry period.
    let stopped_at = Instant::now();
    leader_stop.cancel();
    leader.task.await.unwrap().unwrap();
    wait_for(&mut standby.is_leader, true).await;
    assert!(
        stopped_at.elapsed() <= Duration::from_secs(2),
        "{:?}",
        stopped_at.elapsed()
    );

    a_stop.cancel();
    b_stop.cancel();
    standby.task.await.unwrap().unwrap();
    assert_eq!(holder(&store), None, "the last leader released too");
    exclusive.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_crashed_leader_is_replaced_only_after_its_lease_expires() {
    let store = Arc::new(Mutex::new(Store::default()));
    let clock = Arc::new(SimClock {
        base: Timestamp::from_second(1_800_000_000).unwrap(),
        start: Instant::now(),
    });
    let (mut a, _a_stop) = replica(&store, &clock, "pod-a");
    wait_for(&mut a.is_leader, true).await;
    let (mut b, b_stop) = replica(&store, &clock, "pod-b");
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(!*b.is_leader.borrow());

    // Crash: the task vanishes without releasing.
    a.task.abort();
    let crashed_at = Instant::now();
    let last_renew = {
        let store = store.lock();
        let renew = store.lease.as_ref().unwrap()["spec"]["renewTime"]
            .as_str()
            .unwrap()
            .to_owned();
        renew.parse::<Timestamp>().unwrap()
    };
    wait_for(&mut b.is_leader, true).await;
    let took_over = clock.now();
    let after_renew = took_over.duration_since(last_renew);
    assert!(
        after_renew > SignedDuration::from_secs(15) && after_renew <= SignedDuration::from_secs(17),
        "took over {after_renew:?} after the last renewal; want just past the 15 s lease"
    );
    assert!(crashed_at.elapsed() <= Duration::from_secs(17));
    assert_eq!(holder(&store).as_deref(), Some("pod-b"));
    b_stop.cancel();
    b.task.await.unwrap().unwrap();
}
