//! The write verb for the document, measured before choosing one: on the
//! server under test, back to back, a ConfigMap of a given payload written
//! by each conditional verb the operator could use, each conditioned on the
//! resourceVersion it last wrote:
//!
//! * server-side apply with the resourceVersion in the body;
//! * update (PUT) with the resourceVersion in the body;
//! * JSON patch with a `test` of `/metadata/resourceVersion`, replacing the
//!   payload's key.
//!
//! Each write's time is the request's round trip (the answer carries the new
//! version); the verbs take turns, so load on the machine falls on all. The
//! payloads are the sizes of a published document: gzip (incompressible
//! bytes in `binaryData`) of 200 KB (5,000 pods / 20,000 static shards) and
//! 840 KB (20,000 Kinesis shards with hash key ranges), and plain JSON in
//! `data` of 300 KB. The
//! payloads are the sizes of a published document: gzip (incompressible
//! bytes in `binaryData`) of 200 KB (5,000 pods / 20,000 static shards) and
//! 840 KB (20,000 Kinesis shards with hash key ranges), and plain JSON in
//! `data` of 300 KB.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common;

/// Writes per verb and payload.
const WRITES: usize = 40;
/// The ConfigMap the writes go to.
const NAME: &str = "verb-probe";

/// Measures every verb with every payload in namespace `ns` and prints a
/// table.
pub async fn report(client: &kube::Client, ns: &str) {
    println!("\nthe document's write verbs, {WRITES} writes each, back to back:");
    println!("| payload | verb | p50 | p99 |\n|---|---|---|---|");
    for (label, payload) in payloads() {
        for (verb, p50, p99) in measure(client, ns, &payload).await {
            println!(
                "| {label} | {verb} | {:.0} ms | {:.0} ms |",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            );
        }
    }
}

/// The payloads measured, labelled.
fn payloads() -> Vec<(&'static str, ConfigMap)> {
    // xorshift: bytes that do not compress, as gzip output does not.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[0]
            })
            .collect()
    };
    let gzip = |bytes: Vec<u8>| ConfigMap {
        binary_data: Some(BTreeMap::from([(
            "assignment.json.gz".to_owned(),
            ByteString(bytes),
        )])),
        ..Default::default()
    };
    let json: String =
        std::iter::repeat_n("{\"owner\":\"consumer-7d9f-abcde\"},", 300_000 / 32).collect();
    vec![
        ("gzip 200 KB", gzip(bytes(200_000))),
        ("gzip 840 KB", gzip(bytes(840_000))),
        (
            "plain JSON 300 KB",
            ConfigMap {
                data: Some(BTreeMap::from([("assignment.json".to_owned(), json)])),
                ..Default::default()
            },
        ),
    ]
}

/// p50 and p99 of each verb writing `payload`, in the order SSA, PUT, JSON
/// patch.
async fn measure(
    client: &kube::Client,
    ns: &str,
    payload: &ConfigMap,
) -> Vec<(&'static str, Duration, Duration)> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let key = payload
        .binary_data
        .as_ref()
        .and_then(|b| b.keys().next().cloned())
        .map(|k| format!("/binaryData/{}", escape(&k)))
        .or_else(|| {
            let data = payload.data.as_ref()?;
            Some(format!("/data/{}", escape(data.keys().next()?)))
        })
        .expect("a payload to write");
    let mut cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            ..Default::default()
        },
        data: payload.data.clone(),
        binary_data: payload.binary_data.clone(),
        ..Default::default()
    };
    let mut version = api
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the probe")
        .metadata
        .resource_version;
    let names = [
        "server-side apply",
        "update (PUT)",
        "JSON patch with a test",
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for round in 0..WRITES {
        for (verb, times) in times.iter_mut().enumerate() {
            // Every write changes the payload a little, as a new epoch does.
            let marker = format!("{round}-{verb}");
            let changed = with_marker(&cm, &marker);
            let started = Instant::now();
            let written = match verb {
                0 => {
                    let mut body = changed.clone();
                    body.metadata.resource_version = version.clone();
                    let mut body = serde_json::to_value(&body).expect("a ConfigMap serialises");
                    body["apiVersion"] = json!("v1");
                    body["kind"] = json!("ConfigMap");
                    api.patch(
                        NAME,
                        &PatchParams::apply("shardring-bench").force(),
                        &Patch::Apply(&body),
                    )
                    .await
                }
                1 => {
                    let mut body = changed.clone();
                    body.metadata.resource_version = version.clone();
                    api.replace(NAME, &PostParams::default(), &body).await
                }
                _ => {
                    let value = match key.starts_with("/binaryData") {
                        true => json!(changed.binary_data.as_ref().and_then(|b| b.values().next())),
                        false => json!(changed.data.as_ref().and_then(|d| d.values().next())),
                    };
                    let patch: json_patch::Patch = serde_json::from_value(json!([
                        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                        {"op": "replace", "path": key, "value": value},
                    ]))
                    .expect("a JSON patch");
                    api.patch(NAME, &PatchParams::default(), &Patch::<()>::Json(patch))
                        .await
                }
            }
            .unwrap_or_else(|e| panic!("{}: {e}", names[verb]));
            times.push(started.elapsed());
            version = written.metadata.resource_version;
            cm = changed;
        }
    }
    api.delete(NAME, &Default::default())
        .await
        .expect("delete the probe");
    names
        .iter()
        .zip(times)
        .map(|(name, mut t)| {
            t.sort();
            (
                *name,
                common::percentile(&t, 0.5),
                common::percentile(&t, 0.99),
            )
        })
        .collect()
}

/// `cm` with its payload changed in its first bytes, to `marker`.
fn with_marker(cm: &ConfigMap, marker: &str) -> ConfigMap {
    let mut changed = cm.clone();
    if let Some(binary) = changed.binary_data.as_mut() {
        for value in binary.values_mut() {
            let bytes = marker.as_bytes();
            let mut v = value.0.clone();
            let n = bytes.len().min(v.len());
            v[..n].copy_from_slice(&bytes[..n]);
            *value = ByteString(v);
        }
    } else if let Some(data) = changed.data.as_mut() {
        let data: &mut BTreeMap<String, String> = data;
        for value in data.values_mut() {
            value.replace_range(..marker.len().min(value.len()), marker);
        }
    }
    changed
}

/// A JSON pointer segment.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}
