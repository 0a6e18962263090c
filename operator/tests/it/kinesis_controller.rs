//! The controller's source path on the emulator: a Kinesis ShardGroup without
//! a lease table read through [`Sources`] (the real topology reader behind a
//! fault proxy in front of kinesis-local) and planned by the pure plan step.
//! After a split the published document places the children at once, shows
//! their parent, and the group says `OrderingNotEnforced`; the requeue is the
//! source's jittered refresh; a throttled read keeps the document whole and
//! marks the topology stale.

use std::sync::Arc;
use std::time::Duration;

use shardring::controller::Sources;
use shardring::crds::ShardPhase;
use shardring::crds::shard_group::{KinesisSource, ShardSource as SourceSpec};
use shardring::source::TopologySource;
use shardring::source::kinesis::pacing::Backoff;
use shardring::source::kinesis::{KinesisTopologySource, ReaderOptions};
use shardring_core::conditions::{self, DEGRADED, ORDERING_NOT_ENFORCED};
use shardring_core::plan;

use crate::support;
use crate::support::proxy::{Fault, FaultProxy};
use shardring_core::fixtures::{GROUP_UID, observation, pods, settle};

const PARENT: &str = "shardId-000000000000";

const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(20),
    cap: Duration::from_millis(100),
    max_attempts: 3,
};

#[tokio::test]
async fn a_split_without_a_lease_table_is_placed_at_once_with_its_lineage() {
    let kinesis = support::kinesis();
    let admin = support::kinesis_admin(&kinesis.endpoint()).await;
    support::create_stream(&admin, "orders", 1).await;
    let proxy = FaultProxy::start(&kinesis.endpoint()).await;
    let options = ReaderOptions {
        backoff: BACKOFF,
        ..support::fast_options(None)
    };
    let reader = Arc::new(support::reader_with(&proxy.endpoint(), "orders", options, None).await);
    let source = Arc::new(KinesisTopologySource::new(reader, None));
    let shared = source.clone();
    let sources =
        Sources::from_fn(move |_| Ok(Box::new(shared.clone()) as Box<dyn TopologySource>));

    let mut obs = observation(1, pods(2));
    obs.group.metadata.uid = Some(GROUP_UID.into());
    obs.group.spec.source = SourceSpec::Kinesis(
        serde_json::from_value::<KinesisSource>(serde_json::json!({
            "streamName": "orders", "refreshInterval": "30s"
        }))
        .unwrap(),
    );

    support::split_in_half(&admin, "orders", PARENT, 0, u128::MAX).await;
    obs.topology = sources.read(&obs.group, obs.now).await;
    assert!(obs.topology.error.is_none(), "{:?}", obs.topology.error);
    assert_eq!(obs.topology.ordering_enforced, Some(false));
    let decision = plan(&obs);
    let requeue = decision.requeue_after;
    assert!(
        (Duration::from_secs(27)..=Duration::from_secs(33)).contains(&requeue),
        "jittered 30s refresh, got {requeue:?}"
    );
    let c = conditions::find(&decision.status.conditions, ORDERING_NOT_ENFORCED).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "NoLeaseTable")
    );
    let doc = decision
        .document_write
        .clone()
        .map(|w| w.document)
        .expect("first publish");
    let children: Vec<_> = doc
        .shards
        .iter()
        .filter(|(id, _)| id.as_str() != PARENT)
        .collect();
    assert_eq!(children.len(), 2);
    for (id, record) in &children {
        assert_eq!(record.parents, vec![PARENT.to_owned()], "{id}");
        assert_eq!(record.state, ShardPhase::Active, "{id} placed at once");
    }
    let obs = settle(obs);

    // Throttled out: the last topology stays, the document is not touched.
    proxy.push(std::iter::repeat_n(
        Fault::Throttle,
        BACKOFF.max_attempts as usize,
    ));
    let mut later = obs.clone();
    later.now = obs.now + jiff::SignedDuration::from_secs(45);
    later.topology = sources.read(&later.group, later.now).await;
    assert_eq!(
        later.topology.error.as_ref().map(|e| e.reason()),
        Some("Throttled")
    );
    let decision = plan(&later);
    assert!(decision.document_write.is_none(), "never shrinks");
    let degraded = conditions::find(&decision.status.conditions, DEGRADED).unwrap();
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "Throttled")
    );
    assert!(degraded.message.contains("45s ago"), "{}", degraded.message);
    assert!(decision.requeue_after <= Duration::from_secs(30));
}
