//! From a pod's Ready to its first view, on a real API server (the kit's:
//! `KUBECONFIG` must point at it; without a node): `shardring run` (the
//! binary, peer-IP check on) serves the endpoint on loopback; a rolling
//! deploy replaces 10 Ready pods one at a time. Each new pod is created
//! without an IP; its consumer, a socket bound to the pod's address
//! (`127.0.0.N`, which the bench then writes as the pod's `podIP` with
//! `Ready=True`, as a kubelet would), asks for its view every 10 ms with a
//! token bound to the pod (a TokenRequest, as a projected volume holds).
//! The figure is the time from the status write's answer to the first 200,
//! p50/p99/max over the deploy.
//!
//!     KUBECONFIG=... cargo bench -p shardring --bench ready_to_view
//!
//! `SHARDRING_BENCH_OPERATOR=/path/to/shardring` measures another build
//! (common.rs).

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use shardring_devkit::fixtures;

const PODS: usize = 10;
const APP: &str = "consumer";

fn pod(namespace: &str, name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {fixtures::APP_LABEL: APP}},
        "spec": {"containers": [{"name": "consumer", "image": "registry.example/consumer:1"}]},
    }))
    .expect("a pod")
}

/// Marks `name` Ready at `ip`, as the kubelet does once its container runs.
async fn ready(pods: &Api<Pod>, name: &str, ip: IpAddr) {
    let now = jiff::Timestamp::now().to_string();
    let mut status = fixtures::ready_pod(pods.namespace().unwrap_or_default(), name, APP, &now);
    status["status"]["podIP"] = json!(ip.to_string());
    status["status"]["podIPs"] = json!([{"ip": ip.to_string()}]);
    let status = json!({"status": status["status"]});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the pod's status");
}

async fn apply(client: &Client, value: Value) {
    let gvk = GroupVersionKind::try_from(&kube::core::TypeMeta {
        api_version: value["apiVersion"].as_str().unwrap().to_owned(),
        kind: value["kind"].as_str().unwrap().to_owned(),
    })
    .unwrap();
    let resource = ApiResource::from_gvk(&gvk);
    let name = value["metadata"]["name"].as_str().unwrap().to_owned();
    let api: Api<DynamicObject> = match value["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply("shardring-bench").force(),
        &Patch::Apply(&value),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

async fn wait<T, F: Future<Output = Option<T>>>(what: &str, mut probe: impl FnMut() -> F) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A token of `pod` for the endpoint's audience.
async fn token(client: &Client, namespace: &str, pod: &str, uid: &str) -> String {
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    wait("the default service account", || {
        let accounts = accounts.clone();
        async move { accounts.get_opt("default").await.ok().flatten() }
    })
    .await;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![shardring_crds::endpoint::DEFAULT_AUDIENCE.to_owned()],
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.to_owned()),
                uid: Some(uid.to_owned()),
            }),
            expiration_seconds: Some(600),
        },
        ..TokenRequest::default()
    };
    accounts
        .create_token_request("default", &PostParams::default(), &request)
        .await
        .expect("a token")
        .status
        .expect("a token status")
        .token
}

/// Asks for `pod`'s view from `source` every 10 ms until the endpoint
/// answers 200; returns when it did.
async fn first_200(
    endpoint: SocketAddr,
    source: IpAddr,
    tls: tokio_rustls::TlsConnector,
    path: String,
    token: String,
) -> Instant {
    let started = Instant::now();
    let mut sender = None;
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no 200 from {source}"
        );
        if sender.is_none() {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(source, 0)).unwrap();
            let tcp = socket.connect(endpoint).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let name = ServerName::try_from("localhost").unwrap();
            let stream = tls.connect(name, tcp).await.unwrap();
            let (s, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(connection);
            sender = Some(s);
        }
        let s = sender.as_mut().unwrap();
        let request = http::Request::get(&path)
            .header("host", "localhost")
            .header("authorization", format!("Bearer {token}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        match s.send_request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                let close = response
                    .headers()
                    .get("connection")
                    .is_some_and(|v| v == "close");
                let _ = response.into_body().collect().await;
                if status == 200 {
                    return Instant::now();
                }
                if close {
                    sender = None;
                }
            }
            Err(_) => sender = None,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    shardring::runtime::tls::install_crypto_provider();
    let client = Client::try_default()
        .await
        .expect("KUBECONFIG pointing at a cluster (the kit)");
    let namespace = format!("ready-{}", std::process::id());
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in fixtures::crds() {
        apply(&client, crd).await;
    }
    for crd in shardring_crds::crd::crds() {
        let name = crd.metadata.name.clone().unwrap();
        wait("the CRDs established", || {
            let (crds, name) = (crds.clone(), name.clone());
            async move {
                let crd = crds.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }
    apply(&client, fixtures::namespace(&namespace)).await;
    apply(&client, fixtures::pool(&namespace, "p", APP)).await;
    apply(&client, fixtures::static_group(&namespace, "g", "p", 40)).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace);
    let address = |i: usize| IpAddr::V4(Ipv4Addr::new(127, 0, 1, u8::try_from(i).unwrap()));
    for i in 0..PODS {
        let name = format!("old-{i}");
        pods.create(&PostParams::default(), &pod(&namespace, &name))
            .await
            .unwrap();
        ready(&pods, &name, address(i)).await;
    }

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = SocketAddr::from(([127, 0, 0, 1], port));
    let mut command = common::operator_command();
    command
        .args(["run", "--no-node-watch", "--metrics-addr", "127.0.0.1:0"])
        .args(["--namespace", &namespace, "--log-filter", "warn"])
        .args(["--endpoint-addr", &endpoint.to_string()])
        .env("POD_NAMESPACE", &namespace)
        .stdin(Stdio::null());
    let mut operator = command.spawn().expect("shardring run");

    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
    let ca = wait("the endpoint's CA", || {
        let config_maps = config_maps.clone();
        async move {
            let cm = config_maps
                .get_opt(shardring_crds::endpoint::CA_CONFIGMAP_NAME)
                .await
                .ok()??;
            cm.data?
                .get(shardring_crds::endpoint::CA_CONFIGMAP_KEY)
                .cloned()
        }
    })
    .await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = tokio_rustls::TlsConnector::from(Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    ));
    let path = |_: &str| {
        format!(
            "{}?epoch=0&waitSeconds=0",
            shardring_crds::endpoint::view_path(&namespace, "g")
        )
    };

    // The old pods' first requests warm the group's views.
    let old_uid = pods.get("old-0").await.unwrap().metadata.uid.unwrap();
    let old_token = token(&client, &namespace, "old-0", &old_uid).await;
    first_200(endpoint, address(0), tls.clone(), path("old-0"), old_token).await;

    let mut latencies = Vec::new();
    for i in 0..PODS {
        let name = format!("new-{i}");
        let created = pods
            .create(&PostParams::default(), &pod(&namespace, &name))
            .await
            .unwrap();
        let uid = created.metadata.uid.unwrap();
        let token = token(&client, &namespace, &name, &uid).await;
        let ip = address(100 + i);
        let poller = tokio::spawn(first_200(endpoint, ip, tls.clone(), path(&name), token));
        // Refused meanwhile: the pod has no IP yet.
        tokio::time::sleep(Duration::from_millis(200)).await;
        ready(&pods, &name, ip).await;
        let known = Instant::now();
        let answered = poller.await.unwrap();
        latencies.push(answered.saturating_duration_since(known));
        pods.delete(
            &format!("old-{i}"),
            &DeleteParams::default().grace_period(0),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    latencies.sort();
    println!(
        "Ready (status written) -> first 200, rolling deploy of {PODS} pods, peer-IP check on, \
         consumer asking every 10 ms"
    );
    println!(
        "p50 {:.0} ms   p99 {:.0} ms   max {:.0} ms   all {:?}",
        common::percentile(&latencies, 0.5).as_secs_f64() * 1000.0,
        common::percentile(&latencies, 0.99).as_secs_f64() * 1000.0,
        latencies.last().unwrap().as_secs_f64() * 1000.0,
        latencies.iter().map(|l| l.as_millis()).collect::<Vec<_>>()
    );
    let _ = operator.kill();
    let _ = operator.wait();
    let _ = Api::<Namespace>::all(client)
        .delete(&namespace, &DeleteParams::default())
        .await;
}
