//! Day-2 operations against a running operator on the real control plane
//! (`shardring run`, as a user runs it): one namespace with a ConsumerPool
//! of three Ready pods that grows to six, and four ShardGroups whose states
//! cover what the alerts, the dashboard and the GitOps health checks read:
//! `g-ok` (Ready and balanced), `g-budget` (its move budget of one move an
//! hour defers the moves the new pods call for: `Balanced=False
//! MovesDeferred`), `g-orphan` (its pool does not exist: not Ready,
//! `Degraded=True PoolNotFound`) and `g-stream` (a Kinesis stream on
//! kinesis-local). The consumer endpoint answers a health check and
//! refuses a bad token. Then:
//! - the operator's `/metrics` passes `promtool check metrics` (Debian's
//!   promtool): no findings;
//! - a real Prometheus (Debian's) scrapes the operator every second, and
//!   every query of the Grafana dashboard returns series;
//! - the gauges the alerts read say what the groups' status says;
//! - the Argo CD health checks (run by Debian's `lua5.4`) and Flux's
//!   kstatus rules read the live objects as documented: `g-ok`, `g-stream`
//!   and the pool Healthy/Current, `g-budget` Suspended/Current, `g-orphan`
//!   Degraded/InProgress, and `g-ok` after a spec change no operator has
//!   seen Progressing/InProgress.
//!
//! Without a cluster it prints `SKIPPED: ...` and passes; without promtool
//! prometheus or lua5.4 those checks print `SKIPPED` (CI installs both and sets
//! `SHARDRING_REQUIRE_TOOLS=1`, which makes a missing one fail).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use shardring::source::kinesis::reader::emulator_environment;
use shardring_consumer::view::endpoint::{EndpointClient, EndpointConfig};
use shardring_crds::{CONTROLLER_CLASS_LABEL, ConsumerPool, ShardGroup};
use shardring_devkit::emulators::Emulator;
use shardring_devkit::fixtures;
use shardring_e2e::harness::CONTROLLER_CLASS;
use shardring_ops::argocd::HealthCheck;
use shardring_ops::dashboard;
use shardring_ops::kstatus::Status;
use shardring_ops::prometheus::Prometheus;
use shardring_ops::tools::find_or_skip;

use crate::kit_group::{
    Running, TestResult, free_port, in_fresh_namespace, operator_home, pool_of_ready_pods,
    ready_pod, scrape_metrics, shardring_run, wait_until,
};

const WAIT: Duration = Duration::from_secs(90);
const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
const REGION: &str = "us-east-1";
const STREAM: &str = "day2";
const OPERATOR_POD: &str = "shardring-0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_dashboard_and_health_read_a_running_operator() {
    in_fresh_namespace("day2", "day2", async |client, namespace| {
        let dir = std::env::temp_dir().join(namespace);
        std::fs::create_dir_all(&dir)?;
        let result = scenario(client, namespace, &dir).await;
        let _ = std::fs::remove_dir_all(&dir);
        result
    })
    .await;
}

/// A group of the suite's controller class, from `spec`.
fn group(namespace: &str, name: &str, spec: Value) -> TestResult<ShardGroup> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "shardring.io/v1alpha1",
        "kind": "ShardGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { CONTROLLER_CLASS_LABEL: CONTROLLER_CLASS },
        },
        "spec": spec,
    }))?)
}

/// The objects: the pool, three Ready pods, the four groups, the operator's
/// own pod; the stream on `kinesis`.
async fn install(client: &Client, namespace: &str, kinesis: &str) -> TestResult {
    pool_of_ready_pods(client, namespace, 3, IP).await?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let own: Pod =
        serde_json::from_value(fixtures::gated_pod(namespace, OPERATOR_POD, "shardring"))?;
    pods.create(&PostParams::default(), &own).await?;
    let static_source = |name: &str, count: u32| json!({"static": {"count": count, "nameTemplate": format!("{name}-{{index}}")}});
    let groups = [
        group(
            namespace,
            "g-ok",
            json!({"poolRef": {"name": "p"}, "source": static_source("g-ok", 6),
                   "handoff": {"drainTimeout": "1s"}, "rebalance": {"delay": "0s"}}),
        )?,
        group(
            namespace,
            "g-budget",
            json!({"poolRef": {"name": "p"}, "source": static_source("g-budget", 12),
                   "handoff": {"drainTimeout": "1s"},
                   "rebalance": {"delay": "0s", "maxMovesPerWindow": 1, "window": "1h"}}),
        )?,
        group(
            namespace,
            "g-orphan",
            json!({"poolRef": {"name": "missing"}, "source": static_source("g-orphan", 2)}),
        )?,
        group(
            namespace,
            "g-stream",
            json!({"poolRef": {"name": "p"},
                   "source": {"kinesis": {"streamName": STREAM, "region": REGION, "endpoint": kinesis}},
                   "handoff": {"drainTimeout": "1s"}, "rebalance": {"delay": "0s"}}),
        )?,
    ];
    let api = Api::<ShardGroup>::namespaced(client.clone(), namespace);
    for group in groups {
        api.create(&PostParams::default(), &group).await?;
    }
    Ok(())
}

/// Condition `type_` of group `name`: its status and reason.
async fn condition(
    client: &Client,
    namespace: &str,
    name: &str,
    type_: &str,
) -> Result<(String, String), String> {
    let group = Api::<ShardGroup>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|e| e.to_string())?;
    let status = group.status.unwrap_or_default();
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
        .ok_or_else(|| format!("{name} has no {type_} condition yet"))
}

/// Waits until group `name`'s condition `type_` is `status` with `reason`.
async fn wait_condition(
    client: &Client,
    namespace: &str,
    name: &str,
    type_: &str,
    want: (&str, &str),
) -> TestResult {
    let what = format!("{name} {type_}={} {}", want.0, want.1);
    wait_until(&what, WAIT, || async {
        let seen = condition(client, namespace, name, type_).await?;
        if (seen.0.as_str(), seen.1.as_str()) == want {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await
}

/// The value of the sample `series` (name and labels exactly as exported)
/// in `text`, if it is there.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// `promtool check metrics` on `text`: its findings (empty when none).
fn promtool_findings(promtool: &std::path::Path, text: &str) -> TestResult<String> {
    use std::io::Write as _;
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("promtool has no stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The endpoint's health check (200) and a view asked with a token the
/// API server does not know (401), with the CA of the Secret the operator
/// created.
async fn use_the_endpoint(
    client: &Client,
    namespace: &str,
    port: u16,
    dir: &std::path::Path,
) -> TestResult {
    let home = operator_home(namespace)?;
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &home);
    let ca = wait_until("the endpoint's self-signed Secret", WAIT, || async {
        let secret = secrets
            .get("shardring-endpoint-selfsigned")
            .await
            .map_err(|e| e.to_string())?;
        secret
            .data
            .unwrap_or_default()
            .remove("ca.crt")
            .ok_or_else(|| "no ca.crt".to_owned())
    })
    .await?;
    let (ca_file, token_file) = (dir.join("ca.crt"), dir.join("token"));
    std::fs::write(&ca_file, ca.0)?;
    std::fs::write(&token_file, "not-a-token-the-api-server-issued")?;
    let mut config = EndpointConfig::new(format!("https://127.0.0.1:{port}"));
    config.ca_file = ca_file;
    config.token_file = token_file;
    let endpoint = EndpointClient::new(config)?;
    let timeout = Duration::from_secs(10);
    let health = wait_until("the endpoint's /v1/healthz", WAIT, || async {
        endpoint
            .send(http::Method::GET, "/v1/healthz", None, timeout)
            .await
            .map_err(|e| e.to_string())
    })
    .await?;
    assert_eq!(health.status, 200, "{:?}", health.body);
    let path = format!("/v1/namespaces/{namespace}/shardgroups/g-ok/view");
    let refused = endpoint
        .send(http::Method::GET, &path, None, timeout)
        .await?;
    assert_eq!(refused.status, 401, "a bad token: {:?}", refused.body);
    Ok(())
}

async fn scenario(client: &Client, namespace: &str, dir: &std::path::Path) -> TestResult {
    let emulator = tokio::task::spawn_blocking(Emulator::start_kinesis).await??;
    let sdk = shardring_consumer::clients::sdk_config(Some(REGION), true).await;
    let kinesis = shardring_consumer::clients::kinesis_client(&sdk, Some(&emulator.endpoint()));
    shardring_devkit::stream::reshard::create_stream(&kinesis, STREAM, 4).await?;
    install(client, namespace, &emulator.endpoint()).await?;

    let (metrics_port, endpoint_port) = (free_port()?, free_port()?);
    let operator = Running(
        shardring_run(client, namespace, OPERATOR_POD, None)
            .await?
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args(["--endpoint-addr", &format!("127.0.0.1:{endpoint_port}")])
            .arg("--endpoint-tls-dir")
            .arg(dir.join("no-certificate"))
            .args(["--endpoint-dns-name", "endpoint.example.com"])
            .envs(emulator_environment(REGION))
            .spawn()?,
    );
    let prometheus = match find_or_skip("dashboard queries on the kit", "prometheus", "PROMETHEUS")
    {
        Some(binary) => Some(Prometheus::start(
            &binary,
            dir,
            &[SocketAddr::from(([127, 0, 0, 1], metrics_port))],
            Duration::from_secs(1),
        )?),
        None => None,
    };

    for name in ["g-ok", "g-budget", "g-stream"] {
        wait_condition(client, namespace, name, "Ready", ("True", "Published")).await?;
    }
    wait_condition(
        client,
        namespace,
        "g-orphan",
        "Degraded",
        ("True", "PoolNotFound"),
    )
    .await?;
    // Three more pods: every group's fair share moves; g-budget may make one
    // optional move an hour, so the rest wait.
    let since = jiff::Timestamp::now().to_string();
    for i in 3..6 {
        ready_pod(client, namespace, &format!("c-{i}"), "consumer", &since, IP).await?;
    }
    wait_condition(
        client,
        namespace,
        "g-budget",
        "Balanced",
        ("False", "MovesDeferred"),
    )
    .await?;
    wait_condition(
        client,
        namespace,
        "g-ok",
        "Progressing",
        ("False", "Stable"),
    )
    .await?;
    use_the_endpoint(client, namespace, endpoint_port, dir).await?;

    // What the alerts read agrees with the status.
    let labels = |group: &str| format!("{{namespace=\"{namespace}\",shardgroup=\"{group}\"}}");
    let text = wait_until("the gauges of every group in /metrics", WAIT, || async {
        let text = scrape_metrics(metrics_port)?;
        let deferred = sample(
            &text,
            &format!("shardring_group_moves_deferred{}", labels("g-budget")),
        );
        let ready = sample(
            &text,
            &format!("shardring_group_ready{}", labels("g-orphan")),
        );
        match (deferred, ready) {
            (Some(d), Some(r)) if d > 0.0 && r == 0.0 => Ok(text),
            seen => Err(format!("deferred, orphan ready: {seen:?}")),
        }
    })
    .await?;
    for (series, want) in [
        (format!("shardring_group_ready{}", labels("g-ok")), 1.0),
        (
            format!("shardring_group_drain_timeout_seconds{}", labels("g-ok")),
            1.0,
        ),
        (
            format!("shardring_group_moves_deferred{}", labels("g-ok")),
            0.0,
        ),
        (
            format!("shardring_group_document_limit_bytes{}", labels("g-ok")),
            983_040.0,
        ),
    ] {
        assert_eq!(sample(&text, &series), Some(want), "{series}");
    }
    let bytes = sample(
        &text,
        &format!("shardring_group_document_bytes{}", labels("g-ok")),
    );
    assert!(bytes.is_some_and(|b| b > 0.0), "document bytes: {bytes:?}");
    let success = sample(
        &text,
        &format!(
            "shardring_group_last_success_timestamp_seconds{}",
            labels("g-ok")
        ),
    );
    let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    assert!(
        success.is_some_and(|s| (now - s).abs() < 300.0),
        "last success {success:?}, now {now}"
    );

    // Every family the operator exports is in docs/operations.md. (A
    // labelled family appears only once it has a series: the throughput,
    // scaling, lease-table and hold metrics have none in this scenario.)
    let exported: std::collections::BTreeSet<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(String::from)
        .collect();
    let documented = shardring_ops::docs::documented_metrics(&shardring_ops::docs::read()?);
    let undocumented: Vec<&String> = exported.difference(&documented).collect();
    let missing: Vec<&String> = documented.difference(&exported).collect();
    assert!(
        undocumented.is_empty(),
        "/metrics exports families docs/operations.md does not document: {undocumented:?}"
    );
    println!(
        "metrics: {} families exported, all documented; documented without a series here: {missing:?}",
        exported.len()
    );

    if let Some(promtool) =
        find_or_skip("promtool check metrics on the kit", "promtool", "PROMTOOL")
    {
        let findings = promtool_findings(&promtool, &text)?;
        println!(
            "promtool check metrics: {} findings over {} metric families",
            findings.lines().count(),
            text.lines().filter(|l| l.starts_with("# TYPE")).count()
        );
        assert!(
            findings.trim().is_empty(),
            "promtool check metrics:\n{findings}"
        );
    }

    if let Some(prometheus) = &prometheus {
        let board = dashboard::load()?;
        let queries = dashboard::queries(&board);
        // Every query returns series once Prometheus has scraped the
        // operator a few times (rates need two samples in their window).
        let empty = wait_until("every dashboard query to return series", WAIT, || async {
            let empty: Vec<String> = queries
                .iter()
                .filter(|q| {
                    !prometheus
                        .query(&q.expanded("30s"))
                        .is_ok_and(|s| !s.is_empty())
                })
                .map(|q| format!("{}/{}", q.panel, q.ref_id))
                .collect();
            if empty.is_empty() {
                Ok(())
            } else {
                Err(format!("no series: {empty:?}"))
            }
        })
        .await;
        empty?;
        println!(
            "dashboard: all {} queries return series from the operator",
            queries.len()
        );
    }
    drop(prometheus);

    if let Some(lua) = find_or_skip("Argo CD health checks on the kit", "lua5.4", "LUA") {
        let want = [
            ("ShardGroup", "g-ok", "Healthy", Status::Current),
            ("ShardGroup", "g-stream", "Healthy", Status::Current),
            ("ShardGroup", "g-budget", "Suspended", Status::Current),
            ("ShardGroup", "g-orphan", "Degraded", Status::InProgress),
            ("ConsumerPool", "p", "Healthy", Status::Current),
        ];
        for (kind, name, argo, kstatus) in want {
            check_health(client, namespace, &lua, kind, name, argo, kstatus).await?;
        }
        // A spec change nobody has observed yet: Progressing for both,
        // until an operator reconciles it.
        drop(operator);
        let groups = Api::<ShardGroup>::namespaced(client.clone(), namespace);
        groups
            .patch(
                "g-ok",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"rebalance": {"delay": "1s"}}})),
            )
            .await?;
        check_health(
            client,
            namespace,
            &lua,
            "ShardGroup",
            "g-ok",
            "Progressing",
            Status::InProgress,
        )
        .await?;
    }
    drop(emulator);
    Ok(())
}

/// The live object `kind`/`name` as the API server returns it, through
/// the Argo CD health check and kstatus: `argo` and `kstatus` are what
/// they must answer.
async fn check_health(
    client: &Client,
    namespace: &str,
    lua: &std::path::Path,
    kind: &str,
    name: &str,
    argo: &str,
    kstatus: Status,
) -> TestResult {
    let object = match kind {
        "ShardGroup" => serde_json::to_value(
            Api::<ShardGroup>::namespaced(client.clone(), namespace)
                .get(name)
                .await?,
        )?,
        _ => serde_json::to_value(
            Api::<ConsumerPool>::namespaced(client.clone(), namespace)
                .get(name)
                .await?,
        )?,
    };
    let health = HealthCheck::load(lua, kind)?.resource_health(&object)?;
    let verdict = shardring_ops::kstatus::compute(&object)?;
    println!(
        "health of {kind} {name}: Argo CD {} ({}), kstatus {}",
        health.status, health.message, verdict.status
    );
    assert_eq!(
        health.status, argo,
        "Argo CD health of {kind} {name}: {}",
        health.message
    );
    assert_eq!(
        verdict.status, kstatus,
        "kstatus of {kind} {name}: {}",
        verdict.message
    );
    Ok(())
}
