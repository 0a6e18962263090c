//! Throttling and transient failures, injected by a fault proxy in front of
//! kinesis-local: the reader backs off and retries, gives up after a bounded
//! number of attempts with an error (never an empty topology), keeps its last
//! good topology, and pages with NextToken alone.

use std::time::{Duration, Instant};

use shardring::engine::{PlanInput, Previous, plan};
use shardring::source::kinesis::pacing::Backoff;
use shardring::source::kinesis::{ReaderOptions, TopologyReader};

use crate::support;
use crate::support::proxy::{Fault, FaultProxy};

/// A reader of `stream` through `proxy`, backing off on `backoff`.
async fn reader_via(
    proxy: &FaultProxy,
    stream: &str,
    backoff: Backoff,
    page_size: Option<i32>,
) -> TopologyReader {
    let options = ReaderOptions {
        backoff,
        ..support::fast_options(page_size)
    };
    support::reader_with(&proxy.endpoint(), stream, options, None).await
}

const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(40),
    cap: Duration::from_millis(400),
    max_attempts: 5,
};

#[tokio::test]
async fn throttling_is_retried_with_backoff_then_succeeds() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "hot", 3).await;
    let proxy = FaultProxy::start(&kinesis.endpoint()).await;
    let reader = reader_via(&proxy, "hot", BACKOFF, None).await;

    proxy.push([
        Fault::Throttle,
        Fault::Throttle,
        Fault::ServerError,
        Fault::Throttle,
    ]);
    let started = Instant::now();
    let topology = reader.list().await.expect("succeeds after 4 failures");
    let elapsed = started.elapsed();
    assert_eq!(topology.shards.len(), 3);
    assert_eq!(reader.throttles(), 3);
    assert_eq!(proxy.seen().len(), 5);
    // Full jitter draws each delay from [0, ceiling]; four draws all below
    // 2% of the ceilings' sum (40+80+160+320 ms) has odds under one in 10^5.
    let ceilings: Duration = (0..4).map(|n| BACKOFF.ceiling(n)).sum();
    assert!(elapsed >= ceilings.mul_f64(0.02), "no backoff: {elapsed:?}");
    let seen = proxy.seen();
    let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(
        gaps.iter()
            .all(|gap| *gap <= BACKOFF.cap + Duration::from_millis(500)),
        "{gaps:?}"
    );
}

#[tokio::test]
async fn persistent_throttling_is_an_error_and_the_last_topology_survives() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "busy", 4).await;
    let proxy = FaultProxy::start(&kinesis.endpoint()).await;
    let reader = reader_via(&proxy, "busy", BACKOFF, None).await;
    let good = reader.topology().await.expect("first read");
    assert_eq!(good.shards.len(), 4);

    // Plan once with the good topology.
    let pods = vec![support::ready_pod("a"), support::ready_pod("b")];
    let shards = good.shards.iter().map(|s| shardring::engine::Shard {
        id: s.id.clone(),
        hash_key_range: s.hash_key_range.clone(),
        parents: s.parents(),
        state: shardring::engine::ShardState::Open,
    });
    let input = PlanInput {
        shards: shards.collect::<Vec<_>>().into(),
        pods: pods.clone(),
        ..PlanInput::default()
    };
    let first = plan(&input).expect("plan");

    proxy.push(std::iter::repeat_n(
        Fault::Throttle,
        BACKOFF.max_attempts as usize,
    ));
    let error = reader.topology().await.expect_err("throttled out");
    assert_eq!(error.reason(), "Throttled", "{error}");
    assert_eq!(reader.throttles(), u64::from(BACKOFF.max_attempts));
    // The cache still holds the full topology; planning from it keeps every
    // shard where it was: the assignment does not shrink.
    let kept = reader.last().expect("last good topology");
    assert_eq!(kept.shards, good.shards);
    let previous = first
        .assignment
        .iter()
        .filter_map(|(id, a)| Some((id.clone(), Previous::Owner(a.owner.clone()?))))
        .collect::<std::collections::BTreeMap<_, _>>();
    let again = plan(&PlanInput {
        previous: previous.into(),
        ..input.clone()
    })
    .expect("plan");
    assert_eq!(again.assignment, first.assignment);

    // An empty shard list is a broken response, never "no shards".
    proxy.push(std::iter::repeat_n(Fault::EmptyShards, 1));
    let error = reader.list().await.expect_err("empty list rejected");
    assert_eq!(error.reason(), "SourceError");
    assert_eq!(reader.last().expect("kept").shards.len(), 4);

    // A missing stream is not retried.
    let before = proxy.seen().len();
    proxy.push([Fault::NotFound]);
    let error = reader.list().await.expect_err("not found");
    assert_eq!(error.reason(), "StreamNotFound");
    assert_eq!(proxy.seen().len(), before + 1);
}

#[tokio::test]
async fn follow_up_pages_carry_the_token_without_the_stream_and_retry_in_place() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "paged", 5).await;
    let proxy = FaultProxy::start(&kinesis.endpoint()).await;
    let reader = reader_via(&proxy, "paged", BACKOFF, Some(2)).await;
    // Let the first page through, throttle the second once.
    let topology = {
        let listing = reader.list();
        tokio::pin!(listing);
        // Queue the fault once the first request has been forwarded.
        let mut pushed = false;
        loop {
            tokio::select! {
                result = &mut listing => break result,
                _ = tokio::time::sleep(Duration::from_millis(1)) => {
                    if !pushed && proxy.seen().len() == 1 {
                        proxy.push([Fault::Throttle]);
                        pushed = true;
                    }
                }
            }
        }
    }
    .expect("listing");
    assert_eq!(topology.shards.len(), 5);
    let seen = proxy.seen();
    assert_eq!(reader.throttles(), 1);
    assert_eq!(
        seen.iter()
            .filter(|s| s.fault == Some(Fault::Throttle))
            .count(),
        1
    );
    let bodies: Vec<serde_json::Value> = seen
        .iter()
        .map(|s| serde_json::from_str(&s.body).expect("json body"))
        .collect();
    assert!(
        seen.iter()
            .all(|s| s.target == "Kinesis_20131202.ListShards")
    );
    assert_eq!(bodies[0]["StreamName"], "paged");
    assert!(bodies[0].get("NextToken").is_none());
    // The throttled page is retried with the same token.
    let throttled = seen
        .iter()
        .position(|s| s.fault.is_some())
        .expect("throttled request");
    assert_eq!(
        bodies[throttled]["NextToken"],
        bodies[throttled + 1]["NextToken"]
    );
    for body in &bodies[1..] {
        assert!(body.get("NextToken").is_some(), "{body}");
        assert!(
            body.get("StreamName").is_none() && body.get("StreamARN").is_none(),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_failed_read_observes_the_last_topology_as_stale() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "flaky", 2).await;
    let proxy = FaultProxy::start(&kinesis.endpoint()).await;
    let reader = std::sync::Arc::new(reader_via(&proxy, "flaky", BACKOFF, None).await);
    let source = shardring::source::kinesis::KinesisTopologySource::new(reader, None);

    // Never read yet: a failure has nothing to fall back on.
    proxy.push(std::iter::repeat_n(
        Fault::ServerError,
        BACKOFF.max_attempts as usize,
    ));
    let error = source
        .observe_or_last(jiff::Timestamp::now())
        .await
        .expect_err("nothing to fall back on");
    assert_eq!(error.reason(), "SourceError");

    let good = source
        .observe_or_last(jiff::Timestamp::now())
        .await
        .expect("read");
    assert!(good.stale.is_none());
    proxy.push(std::iter::repeat_n(
        Fault::Throttle,
        BACKOFF.max_attempts as usize,
    ));
    let stale = source
        .observe_or_last(jiff::Timestamp::now())
        .await
        .expect("falls back");
    assert_eq!(stale.stale.as_ref().map(|e| e.reason()), Some("Throttled"));
    assert_eq!(stale.lifecycle.shards, good.lifecycle.shards);
    assert!(!stale.lifecycle.ordering_enforced);
}

#[tokio::test]
async fn calls_throttles_and_topology_age_are_exported() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "metered", 1).await;
    let proxy = FaultProxy::start(&kinesis.endpoint()).await;
    let mut registry = prometheus_client::registry::Registry::with_prefix("shardring");
    let metrics = shardring::source::kinesis::KinesisMetrics::register(&mut registry);
    let options = ReaderOptions {
        backoff: BACKOFF,
        ..support::fast_options(None)
    };
    let reader = support::reader_with(&proxy.endpoint(), "metered", options, Some(metrics)).await;
    proxy.push([Fault::Throttle, Fault::Throttle]);
    reader.topology().await.expect("read");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains("shardring_kinesis_list_shards_calls_total{stream=\"metered\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("shardring_kinesis_list_shards_throttles_total{stream=\"metered\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("shardring_kinesis_topology_age_seconds{stream=\"metered\"}"),
        "{text}"
    );
}

/// A credentials provider that, like an exhausted default chain, has nothing.
#[derive(Debug)]
struct NoCredentials;

impl aws_credential_types::provider::ProvideCredentials for NoCredentials {
    fn provide_credentials<'a>(
        &'a self,
    ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        aws_credential_types::provider::future::ProvideCredentials::ready(Err(
            aws_credential_types::provider::error::CredentialsError::not_loaded(
                "no providers in chain provided credentials",
            ),
        ))
    }
}

fn kinesis_spec(endpoint: &str, region: Option<&str>) -> shardring::crds::ShardGroupSpec {
    serde_json::from_value(serde_json::json!({
        "poolRef": {"name": "p"},
        "source": {"kinesis": {"streamName": "creds", "region": region, "endpoint": endpoint}},
    }))
    .unwrap()
}

#[tokio::test]
async fn missing_credentials_and_region_are_named_as_such() {
    use shardring::source::TopologySource;
    use shardring::source::kinesis::{AwsSettings, KinesisProvider};

    let kinesis = support::kinesis();
    let endpoint = kinesis.endpoint();
    support::create_stream(&support::kinesis_admin(&endpoint).await, "creds", 1).await;

    // No credentials anywhere: the read says NoCredentials and how to fix it.
    let no_credentials = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(NoCredentials),
        )
        .region(aws_config::Region::new(support::REGION))
        .load()
        .await;
    let provider = KinesisProvider::new(AwsSettings::Fixed(Box::new(no_credentials)), None);
    let source = provider
        .source_for(&kinesis_spec(&endpoint, Some(support::REGION)))
        .await
        .unwrap();
    let error = TopologySource::read(&source).await.unwrap_err();
    assert_eq!(error.reason(), "NoCredentials", "{error}");
    assert!(error.to_string().contains("IRSA"), "{error}");

    // No region in the spec nor in the environment: NoRegion, before any call.
    let no_region = support::sdk_config()
        .await
        .to_builder()
        .region(None::<aws_config::Region>)
        .build();
    let provider = KinesisProvider::new(AwsSettings::Fixed(Box::new(no_region)), None);
    let error = provider
        .source_for(&kinesis_spec(&endpoint, None))
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "NoRegion", "{error}");
    assert!(
        error.to_string().contains("spec.source.kinesis.region"),
        "{error}"
    );
}

#[tokio::test]
async fn the_aws_configuration_is_loaded_only_for_the_first_kinesis_group() {
    use std::sync::Arc;

    use shardring::controller::Sources;
    use shardring::source::kinesis::AwsSettings;
    use shardring::source::{Providers, SourceSettings};

    let kinesis = support::kinesis();
    let endpoint = kinesis.endpoint();
    support::create_stream(&support::kinesis_admin(&endpoint).await, "creds", 1).await;
    let providers = Arc::new(Providers::new(
        SourceSettings::default()
            .with_aws(AwsSettings::Fixed(Box::new(support::sdk_config().await))),
        None,
    ));
    let provider = providers.kinesis();
    let sources = Sources::for_providers(providers.clone());
    let now = jiff::Timestamp::now();

    let mut static_group = shardring::crds::ShardGroup::new(
        "static",
        serde_json::from_value(serde_json::json!({
            "poolRef": {"name": "p"},
            "source": {"static": {"count": 3, "nameTemplate": "q-{index}"}},
        }))
        .unwrap(),
    );
    static_group.metadata.uid = Some("static-uid".into());
    let read = sources.read(&static_group, now).await;
    assert_eq!(read.last_good.map(|t| t.shards.len()), Some(3));
    assert!(
        !provider.is_loaded(),
        "a static group never loads AWS settings"
    );

    let mut kinesis_group =
        shardring::crds::ShardGroup::new("stream", kinesis_spec(&endpoint, Some(support::REGION)));
    kinesis_group.metadata.uid = Some("kinesis-uid".into());
    let read = sources.read(&kinesis_group, now).await;
    assert!(read.error.is_none(), "{:?}", read.error);
    assert_eq!(read.last_good.map(|t| t.shards.len()), Some(1));
    assert!(provider.is_loaded());
}
