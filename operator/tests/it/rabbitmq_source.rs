//! The RabbitMQ source against a real broker (Debian's rabbitmq-server,
//! started by the devkit on its own ports; the test prints SKIPPED without
//! it): the partitions are the vhost's queues whose whole name matches the
//! pattern, listed as a user with only the `monitoring` tag and no
//! permission on any resource of the vhost; a queue created is listed at
//! the next read, a queue deleted is gone from it; a stopped broker is an
//! error with reason `BrokerUnreachable` while the last good topology
//! stays, so the plan keeps the published assignment and says why (a
//! Degraded condition and a Warning Event); refused credentials and an
//! unknown vhost have reasons of their own.

use std::sync::Arc;

use jiff::SignedDuration;
use serde_json::json;
use shardring::controller::Sources;
use shardring::crds::ShardGroup;
use std::time::Duration;

use shardring::crds::shard_group::ShardSource;
use shardring::source::rabbitmq::{
    BROKER_UNREACHABLE, Credentials, FixedSecrets, RabbitMqProvider, VHOST_NOT_FOUND,
};
use shardring::source::{Providers, SourceSettings, TopologySource};
use shardring_core::EventKind;
use shardring_core::conditions::{self, DEGRADED};
use shardring_core::fixtures::{document, now, observation, pods, settle};
use shardring_core::observation::TopologyObservation;
use shardring_core::plan::plan;
use shardring_devkit::broker::Broker;

const VHOST: &str = "shop";
const USER: &str = "shardring";
const PASSWORD: &str = "listing-only";

fn group(broker: &Broker, name: &str, vhost: &str, secret: &str) -> ShardGroup {
    let mut group: ShardGroup = serde_json::from_value(json!({
        "apiVersion": "shardring.io/v1alpha1", "kind": "ShardGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid")},
        "spec": {
            "poolRef": {"name": "p"},
            "source": {"rabbitmq": {
                "managementURL": broker.management_url(), "vhost": vhost,
                "queuePattern": r"orders\.[0-9]+", "credentialsSecret": secret
            }}
        }
    }))
    .unwrap();
    group.metadata.generation = Some(1);
    group
}

fn names(read: &TopologyObservation) -> Vec<String> {
    read.last_good
        .as_ref()
        .map(|t| t.shards.iter().map(|s| s.id.clone()).collect())
        .unwrap_or_default()
}

/// Reads `g` until its topology lists `expected` (each read at most a
/// second after the source's last listing sees the broker as it is).
async fn read_until(
    sources: &Sources,
    g: &ShardGroup,
    now: jiff::Timestamp,
    expected: &[&str],
) -> TopologyObservation {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let read = sources.read(g, now).await;
        assert!(read.error.is_none(), "{:?}", read.error);
        if names(&read) == expected {
            return read;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {:?}, not {expected:?}",
            names(&read)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn lists_the_matching_queues_and_never_shrinks_on_an_outage() {
    let Some(mut broker) = Broker::start_or_skip("rabbitmq_source").await else {
        return;
    };
    let admin = broker.admin();
    admin.create_vhost(VHOST).await.unwrap();
    admin
        .create_user(USER, PASSWORD, "monitoring")
        .await
        .unwrap();
    admin
        .set_permissions(VHOST, USER, "^$", "^$", "^$")
        .await
        .unwrap();
    for queue in [
        "orders.0",
        "orders.1",
        "orders.2",
        "orders.2.retry",
        "audit",
    ] {
        admin.declare_queue(VHOST, queue).await.unwrap();
    }
    let secrets = FixedSecrets::default()
        .with(
            "rabbitmq",
            Credentials {
                username: USER.into(),
                password: PASSWORD.into(),
            },
        )
        .with(
            "wrong",
            Credentials {
                username: USER.into(),
                password: "nope".into(),
            },
        );
    let providers = Providers::new(
        SourceSettings::default().with_secrets(Arc::new(secrets)),
        None,
    );
    let sources = Sources::for_providers(Arc::new(providers));
    let g = group(&broker, "orders", VHOST, "rabbitmq");
    let t0 = now();

    let first = sources.read(&g, t0).await;
    assert!(first.error.is_none(), "{:?}", first.error);
    assert_eq!(names(&first), ["orders.0", "orders.1", "orders.2"]);
    assert_eq!(first.source, r"rabbitmq:orders\.[0-9]+ in shop");
    assert_eq!((first.ordering_enforced, first.lineage.len()), (None, 0));
    let refresh = first.refresh_after.expect("the source's own refresh");
    assert!(
        refresh.as_secs_f64() >= 9.0 && refresh.as_secs_f64() <= 11.0,
        "{refresh:?}"
    );

    // A queue created is a new partition; a queue deleted is gone (at the
    // next listing: within a second, the last one stands).
    admin.declare_queue(VHOST, "orders.3").await.unwrap();
    admin.delete_queue(VHOST, "orders.1").await.unwrap();
    let t1 = t0 + SignedDuration::from_secs(10);
    let second = read_until(&sources, &g, t1, &["orders.0", "orders.2", "orders.3"]).await;

    // Plan on it: three partitions over two pods, published.
    let mut obs = observation(3, pods(2));
    obs.group = g.clone();
    obs.topology = second.clone();
    let obs = settle(obs);
    let published = document(&obs).clone();
    assert_eq!(published.shards.len(), 3);

    // The broker goes away: an error with its reason, the last good
    // topology kept, the document kept, a condition and an Event.
    broker.stop().await.unwrap();
    let t2 = t1 + SignedDuration::from_secs(10);
    let down = sources.read(&g, t2).await;
    let error = down.error.clone().expect("the read fails");
    assert_eq!(error.reason(), BROKER_UNREACHABLE, "{error}");
    assert!(
        error.to_string().contains(&broker.management_url()),
        "{error}"
    );
    assert_eq!(
        names(&down),
        ["orders.0", "orders.2", "orders.3"],
        "never shrinks"
    );
    let mut stale = obs.clone();
    stale.topology = down;
    stale.now = t2;
    let decision = plan(&stale);
    assert!(decision.document_write.is_none(), "the document is kept");
    let degraded = conditions::find(&decision.status.conditions, DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", BROKER_UNREACHABLE)
    );
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.kind == EventKind::Warning && e.reason == BROKER_UNREACHABLE),
        "{:?}",
        decision.events
    );
    assert!(
        decision.requeue_after.as_secs() <= 10,
        "{:?}",
        decision.requeue_after
    );

    // Back: the same queues, fresh again.
    broker.start_again().await.unwrap();
    let back = sources.read(&g, t2 + SignedDuration::from_secs(10)).await;
    assert!(back.error.is_none(), "{:?}", back.error);
    assert_eq!(names(&back), ["orders.0", "orders.2", "orders.3"]);

    // However often the group is reconciled, the queues are listed at most
    // once per minimum interval: within it, the last listing stands.
    let provider = RabbitMqProvider::new(Some(Arc::new(FixedSecrets::default().with(
        "rabbitmq",
        Credentials {
            username: USER.into(),
            password: PASSWORD.into(),
        },
    ))));
    let ShardSource::Rabbitmq(spec) = &g.spec.source else {
        unreachable!()
    };
    let paced = provider
        .source_for(spec)
        .unwrap()
        .with_min_interval(Duration::from_secs(3600));
    let listed = paced.read().await.unwrap();
    admin.declare_queue(VHOST, "orders.4").await.unwrap();
    assert_eq!(
        paced.read().await.unwrap(),
        listed,
        "listed again within the interval"
    );
    let unpaced = provider
        .source_for(spec)
        .unwrap()
        .with_min_interval(Duration::ZERO);
    let fresh: Vec<String> = unpaced
        .read()
        .await
        .unwrap()
        .shards
        .iter()
        .map(|s| s.id.clone())
        .collect();
    assert_eq!(fresh, ["orders.0", "orders.2", "orders.3", "orders.4"]);

    // Refused credentials and an unknown vhost say so.
    let refused = sources
        .read(&group(&broker, "refused", VHOST, "wrong"), t2)
        .await;
    assert_eq!(
        refused.error.as_ref().map(|e| e.reason()),
        Some("AccessDenied")
    );
    assert!(names(&refused).is_empty());
    let unknown = sources
        .read(&group(&broker, "unknown", "nowhere", "rabbitmq"), t2)
        .await;
    assert_eq!(
        unknown.error.as_ref().map(|e| e.reason()),
        Some(VHOST_NOT_FOUND)
    );
    let missing = sources
        .read(&group(&broker, "missing", VHOST, "no-such-secret"), t2)
        .await;
    assert_eq!(
        missing.error.as_ref().map(|e| e.reason()),
        Some("CredentialsUnavailable")
    );
}
