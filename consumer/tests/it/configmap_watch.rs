//! The ConfigMap watch view source against a tiny scripted API server on
//! loopback: it lists and watches only the one ConfigMap (field selector
//! `metadata.name=<name>`), takes each newer epoch, ignores a stale epoch,
//! reads the gzip form, and keeps the last view when a version is broken.

use parking_lot::Mutex;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use shardring_consumer::view::{self, kube::ConfigMapSource};
use shardring_crds::assignment::{AssignmentDocument, PodAssignment};
use shardring_devkit::wait::until;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const NAME: &str = "orders-assignment";

fn document(epoch: u64, active: &[&str]) -> AssignmentDocument {
    let mut document = AssignmentDocument::new("prod/orders", epoch);
    document.pods.insert(
        "pod-a".into(),
        PodAssignment {
            active: active.iter().map(|s| (*s).to_owned()).collect(),
            ..PodAssignment::default()
        },
    );
    document
}

fn plain(epoch: u64, active: &[&str], version: u64) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": "prod", "resourceVersion": version.to_string()},
        "data": {"assignment.json": serde_json::to_string(&document(epoch, active)).unwrap()}
    })
}

fn gzipped(epoch: u64, active: &[&str], version: u64) -> serde_json::Value {
    use base64::Engine;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(&serde_json::to_vec(&document(epoch, active)).unwrap())
        .unwrap();
    let bytes = encoder.finish().unwrap();
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": "prod", "resourceVersion": version.to_string()},
        "binaryData": {"assignment.json.gz": base64::engine::general_purpose::STANDARD.encode(bytes)}
    })
}

/// Serves one list (epoch 1), then one watch stream with the given events,
/// then holds further watches open without events. Records request lines.
async fn serve(events: Vec<serde_json::Value>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let task_seen = seen.clone();
    tokio::spawn(async move {
        let mut watches = 0;
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buffer = vec![0u8; 16 * 1024];
            let mut read = 0;
            while !buffer[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer[read..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
            let request = String::from_utf8_lossy(&buffer[..read]).into_owned();
            let line = request.lines().next().unwrap_or_default().to_owned();
            task_seen.lock().push(line.clone());
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
            if line.contains("watch=true") {
                watches += 1;
                let mut body = String::new();
                if watches == 1 {
                    for event in &events {
                        body.push_str(&event.to_string());
                        body.push('\n');
                    }
                }
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                // Keep the watch open; the test ends before it would time out.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    drop(stream);
                });
            } else {
                let list = json!({
                    "apiVersion": "v1", "kind": "ConfigMapList",
                    "metadata": {"resourceVersion": "1"},
                    "items": [plain(1, &["s1"], 1)]
                });
                let _ = stream.write_all(format!("{head}{list}").as_bytes()).await;
            }
        }
    });
    (format!("http://{address}"), seen)
}

async fn wait_for_epoch(assignment: &view::AssignmentView, epoch: u64) {
    let what = format!("epoch {epoch} to arrive");
    until(&what, Duration::from_secs(10), async || {
        assignment.epoch() >= epoch
    })
    .await;
}

#[tokio::test]
async fn watches_the_one_configmap_and_fences_epochs() {
    let events = vec![
        json!({"type": "MODIFIED", "object": plain(3, &["s1", "s2"], 3)}),
        json!({"type": "MODIFIED", "object": plain(2, &["s9"], 4)}),
        json!({"type": "MODIFIED", "object": {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": "prod", "resourceVersion": "5"},
            "data": {"assignment.json": "{broken"}}}),
        json!({"type": "MODIFIED", "object": gzipped(4, &["s2"], 6)}),
    ];
    let (url, seen) = serve(events).await;
    view::kube::install_crypto_provider();
    let config = kube::Config::new(url.parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let (publisher, assignment) = view::channel();
    let task = ConfigMapSource {
        namespace: "prod".into(),
        name: NAME.into(),
        pod: "pod-a".into(),
    }
    .spawn(client, publisher);

    wait_for_epoch(&assignment, 4).await;
    let current = assignment.current().unwrap();
    assert_eq!(current.epoch, 4);
    assert_eq!(current.active, vec!["s2"]);
    assert!(!assignment.can_acquire("s1"));
    assert!(
        !assignment.can_acquire("s9"),
        "the stale epoch 2 was ignored"
    );
    assert!(assignment.can_acquire("s2"));
    task.abort();

    let seen = seen.lock().clone();
    assert!(seen.len() >= 2, "{seen:?}");
    for line in &seen {
        assert!(
            line.starts_with("GET /api/v1/namespaces/prod/configmaps?"),
            "{line}"
        );
        assert!(
            line.contains(&format!("fieldSelector=metadata.name%3D{NAME}")),
            "only the one ConfigMap is listed and watched: {line}"
        );
    }
    assert!(seen.iter().any(|line| line.contains("watch=true")));
}
