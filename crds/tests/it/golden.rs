//! Golden files of the consumer contract: the ConfigMap document and the pod
//! annotation of a small but complete example (Active with a standby, Revoking
//! with a handoff, Pending children with parents, Complete), and the committed
//! JSON Schemas. Serializing must reproduce each file byte for byte and each
//! file must parse back to the same value, so any change to the wire format
//! shows up as a diff to review.
//!
//! Regenerate after an intended change (then review and commit the diff):
//!
//!     SHARDRING_UPDATE_GOLDEN=1 cargo test -p shardring-crds

use std::collections::BTreeMap;

use shardring_crds::assignment::{document_schema, pod_view_schema};
use shardring_crds::{AssignmentDocument, Handoff, HashKeyRange, PodView, ShardPhase, ShardRecord};

use crate::common;

const POD_A: &str = "consumer-7d9f8b6c5d-x2k4q";
const POD_B: &str = "consumer-7d9f8b6c5d-m8n2p";
const POD_C: &str = "consumer-7d9f8b6c5d-q7r9t";

fn range(start: &str, end: &str) -> HashKeyRange {
    HashKeyRange {
        start: start.into(),
        end: end.into(),
    }
}

/// A stream created with 3 shards; shard 0 split into 3 and 4 and was read to
/// its end; shard 1 split into 5 and 6 and is still being read; shard 2 is
/// moving from pod A to pod C.
fn example() -> AssignmentDocument {
    let shard = |owner: Option<&str>,
                 state,
                 standbys: &[&str],
                 parents: &[&str],
                 hash_key_range,
                 handoff: Option<Handoff>| ShardRecord {
        owner: owner.map(str::to_owned),
        state,
        standbys: standbys.iter().map(|s| (*s).to_owned()).collect(),
        parents: parents.iter().map(|s| (*s).to_owned()).collect(),
        hash_key_range: Some(Box::new(hash_key_range)),
        handoff: handoff.map(Box::new),
        checkpoint: None,
        return_hold: None,
    };
    let shards = BTreeMap::from([
        (
            "shardId-000000000000".to_owned(),
            shard(
                None,
                ShardPhase::Complete,
                &[],
                &[],
                range("0", "113427455640312821154458202477256070484"),
                None,
            ),
        ),
        (
            "shardId-000000000001".to_owned(),
            shard(
                Some(POD_A),
                ShardPhase::Active,
                &[POD_B],
                &[],
                range(
                    "113427455640312821154458202477256070485",
                    "226854911280625642308916404954512140969",
                ),
                None,
            ),
        ),
        (
            "shardId-000000000002".to_owned(),
            shard(
                Some(POD_A),
                ShardPhase::Revoking,
                &[POD_B],
                &[],
                range(
                    "226854911280625642308916404954512140970",
                    "340282366920938463463374607431768211455",
                ),
                Some(Handoff {
                    to: Some(POD_C.into()),
                    since: "2026-11-21T19:40:00Z".parse().unwrap(),
                    epoch: 41,
                    lease_counter: Some(17),
                }),
            ),
        ),
        (
            "shardId-000000000003".to_owned(),
            shard(
                Some(POD_B),
                ShardPhase::Active,
                &[POD_C],
                &["shardId-000000000000"],
                range("0", "56713727820156410577229101238628035241"),
                None,
            ),
        ),
        (
            "shardId-000000000004".to_owned(),
            shard(
                Some(POD_C),
                ShardPhase::Active,
                &[POD_A],
                &["shardId-000000000000"],
                range(
                    "56713727820156410577229101238628035242",
                    "113427455640312821154458202477256070484",
                ),
                None,
            ),
        ),
        (
            "shardId-000000000005".to_owned(),
            shard(
                None,
                ShardPhase::Pending,
                &[],
                &["shardId-000000000001"],
                range(
                    "113427455640312821154458202477256070485",
                    "170141183460469231731687303715884105726",
                ),
                None,
            ),
        ),
        (
            "shardId-000000000006".to_owned(),
            shard(
                None,
                ShardPhase::Pending,
                &[],
                &["shardId-000000000001"],
                range(
                    "170141183460469231731687303715884105727",
                    "226854911280625642308916404954512140969",
                ),
                None,
            ),
        ),
    ]);
    AssignmentDocument::from_shards(
        "prod/api-logs",
        42,
        shards,
        [POD_A, POD_B, POD_C].map(str::to_owned),
    )
}

fn pretty<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap() + "\n"
}

#[test]
fn assignment_document_golden() {
    let document = example();
    common::check_file("crds/tests/golden/assignment.json", &pretty(&document));
    let committed =
        std::fs::read_to_string(common::workspace_path("crds/tests/golden/assignment.json"))
            .unwrap();
    assert_eq!(
        serde_json::from_str::<AssignmentDocument>(&committed).unwrap(),
        document
    );
}

#[test]
fn pod_view_golden_is_the_annotation_value() {
    let view = example().pod_view(POD_A);
    assert_eq!(view.active, ["shardId-000000000001"]);
    assert_eq!(view.revoking, ["shardId-000000000002"]);
    assert_eq!(view.standby, ["shardId-000000000004"]);
    common::check_file(
        "crds/tests/golden/pod-view.json",
        &(view.to_annotation() + "\n"),
    );
    let committed =
        std::fs::read_to_string(common::workspace_path("crds/tests/golden/pod-view.json")).unwrap();
    assert_eq!(
        PodView::from_annotation(committed.trim_end()).unwrap(),
        view
    );
}

#[test]
fn pods_index_agrees_with_shard_records() {
    let document = example();
    let b = &document.pods[POD_B];
    assert_eq!(b.active, ["shardId-000000000003"]);
    assert_eq!(b.standby, ["shardId-000000000001", "shardId-000000000002"]);
    assert!(b.revoking.is_empty());
    // The receiving pod of a handoff gets nothing until the old owner let go.
    assert_eq!(document.pods[POD_C].active, ["shardId-000000000004"]);
    // Pending and Complete shards are on nobody's lists.
    for pod in document.pods.values() {
        for id in [
            "shardId-000000000000",
            "shardId-000000000005",
            "shardId-000000000006",
        ] {
            assert!(!pod.active.contains(&id.to_owned()) && !pod.standby.contains(&id.to_owned()));
        }
    }
    // A pod the document does not know gets an empty view at the current epoch.
    assert_eq!(
        document.pod_view("consumer-unknown"),
        PodView {
            epoch: 42,
            ..Default::default()
        }
    );
}

#[test]
fn json_schemas_are_committed() {
    common::check_file(
        "crds/schema/assignment.schema.json",
        &pretty(&document_schema()),
    );
    common::check_file(
        "crds/schema/pod-view.schema.json",
        &pretty(&pod_view_schema()),
    );
}
