//! Streams on kinesis-local as the demo, its scenarios, the operator's tests
//! and the e2e harness set them up: creating a stream, ListShards (parents,
//! hash key ranges, open or closed), and the reshard calls (SplitShard,
//! MergeShards, UpdateShardCount), each waiting until the stream is ACTIVE
//! again.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::wait::WaitError;
use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::types::ScalingType;

/// Why a stream call failed.
#[derive(Debug, thiserror::Error)]
pub enum ReshardError {
    /// The emulator refused or failed a call.
    #[error("AWS emulator call failed: {0}")]
    Aws(String),
    /// The stream did not turn ACTIVE in time.
    #[error(transparent)]
    Wait(#[from] WaitError),
}

/// How long a reshard may keep the stream UPDATING before the caller is told.
pub const ACTIVE_DEADLINE: Duration = Duration::from_secs(60);

fn aws<E: std::error::Error + 'static>(error: E) -> ReshardError {
    ReshardError::Aws(aws_sdk_kinesis::error::DisplayErrorContext(&error).to_string())
}

/// Creates `stream` with `shards` shards and waits until it is ACTIVE.
pub async fn create_stream(
    kinesis: &Client,
    stream: &str,
    shards: u32,
) -> Result<(), ReshardError> {
    kinesis
        .create_stream()
        .stream_name(stream)
        .shard_count(
            i32::try_from(shards)
                .map_err(|_| ReshardError::Aws(format!("{shards} shards: too many")))?,
        )
        .send()
        .await
        .map_err(aws)?;
    wait_active(kinesis, stream).await
}

/// The open shard with the widest hash key range.
pub async fn widest_open(kinesis: &Client, stream: &str) -> Result<StreamShard, ReshardError> {
    list_shards(kinesis, stream)
        .await?
        .into_iter()
        .filter(|s| s.open)
        .max_by_key(|s| s.end - s.start)
        .ok_or_else(|| ReshardError::Aws("no open shard to split".into()))
}

/// Splits `parent` at the middle of its hash key range and waits until the
/// stream is ACTIVE again.
pub async fn split_in_half(
    kinesis: &Client,
    stream: &str,
    parent: &StreamShard,
) -> Result<(), ReshardError> {
    let middle = parent.start + (parent.end - parent.start) / 2 + 1;
    kinesis
        .split_shard()
        .stream_name(stream)
        .shard_to_split(&parent.id)
        .new_starting_hash_key(middle.to_string())
        .send()
        .await
        .map_err(aws)?;
    wait_active(kinesis, stream).await
}

/// Splits the open shard with the widest hash key range in half; returns
/// the parent's id.
pub async fn split_widest(kinesis: &Client, stream: &str) -> Result<String, ReshardError> {
    let parent = widest_open(kinesis, stream).await?;
    split_in_half(kinesis, stream, &parent).await?;
    Ok(parent.id)
}

/// Merges the first two adjacent open shards; returns their ids.
pub async fn merge_adjacent(
    kinesis: &Client,
    stream: &str,
) -> Result<(String, String), ReshardError> {
    let mut open: Vec<_> = list_shards(kinesis, stream)
        .await?
        .into_iter()
        .filter(|s| s.open)
        .collect();
    open.sort_by_key(|s| s.start);
    let (a, b) = open
        .windows(2)
        .find(|w| w[0].end + 1 == w[1].start)
        .map(|w| (w[0].id.clone(), w[1].id.clone()))
        .ok_or_else(|| ReshardError::Aws("no two adjacent open shards".into()))?;
    merge(kinesis, stream, &a, &b).await?;
    Ok((a, b))
}

/// Merges `shard` with its `adjacent` shard and waits until the stream is
/// ACTIVE again.
pub async fn merge(
    kinesis: &Client,
    stream: &str,
    shard: &str,
    adjacent: &str,
) -> Result<(), ReshardError> {
    kinesis
        .merge_shards()
        .stream_name(stream)
        .shard_to_merge(shard)
        .adjacent_shard_to_merge(adjacent)
        .send()
        .await
        .map_err(aws)?;
    wait_active(kinesis, stream).await
}

/// UpdateShardCount to `target` with uniform scaling.
pub async fn update_shard_count(
    kinesis: &Client,
    stream: &str,
    target: u32,
) -> Result<(), ReshardError> {
    kinesis
        .update_shard_count()
        .stream_name(stream)
        .target_shard_count(
            i32::try_from(target)
                .map_err(|_| ReshardError::Aws(format!("{target} shards: too many")))?,
        )
        .scaling_type(ScalingType::UniformScaling)
        .send()
        .await
        .map_err(aws)?;
    wait_active(kinesis, stream).await
}

/// Child → parents of every shard the stream ever had.
pub async fn parents(
    kinesis: &Client,
    stream: &str,
) -> Result<BTreeMap<String, Vec<String>>, ReshardError> {
    Ok(list_shards(kinesis, stream)
        .await?
        .into_iter()
        .filter(|s| !s.parents.is_empty())
        .map(|s| (s.id, s.parents))
        .collect())
}

/// One shard as ListShards reports it.
#[derive(Debug, Clone)]
pub struct StreamShard {
    /// Shard id.
    pub id: String,
    /// Parent and adjacent parent, when it has them.
    pub parents: Vec<String>,
    /// First hash key.
    pub start: u128,
    /// Last hash key.
    pub end: u128,
    /// No ending sequence number yet.
    pub open: bool,
}

/// Every shard the stream ever had, through every ListShards page.
async fn list_shards(kinesis: &Client, stream: &str) -> Result<Vec<StreamShard>, ReshardError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let request = match &token {
            Some(t) => kinesis.list_shards().next_token(t),
            None => kinesis.list_shards().stream_name(stream),
        };
        let page = request.send().await.map_err(aws)?;
        for shard in page.shards() {
            let range = shard.hash_key_range();
            let parse = |s: Option<&str>| s.and_then(|s| s.parse::<u128>().ok()).unwrap_or(0);
            out.push(StreamShard {
                id: shard.shard_id().to_owned(),
                parents: shard
                    .parent_shard_id()
                    .into_iter()
                    .chain(shard.adjacent_parent_shard_id())
                    .map(str::to_owned)
                    .collect(),
                start: parse(range.map(|r| r.starting_hash_key())),
                end: parse(range.map(|r| r.ending_hash_key())),
                open: shard
                    .sequence_number_range()
                    .is_none_or(|r| r.ending_sequence_number().is_none()),
            });
        }
        token = page.next_token().map(str::to_owned);
        if token.is_none() {
            return Ok(out);
        }
    }
}

/// Ids of the shards still open.
pub async fn open_shards(kinesis: &Client, stream: &str) -> Result<Vec<String>, ReshardError> {
    Ok(list_shards(kinesis, stream)
        .await?
        .into_iter()
        .filter(|s| s.open)
        .map(|s| s.id)
        .collect())
}

/// Waits (at most [`ACTIVE_DEADLINE`]) until the stream is ACTIVE.
pub async fn wait_active(kinesis: &Client, stream: &str) -> Result<(), ReshardError> {
    Ok(super::wait_active(kinesis, stream, ACTIVE_DEADLINE).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulators::Emulator;

    /// Split, merge and UpdateShardCount on kinesis-local: open shards and
    /// parents as the demo and the scenarios rely on.
    #[tokio::test]
    async fn reshards_on_kinesis_local() {
        let emulator = tokio::task::spawn_blocking(Emulator::start_kinesis)
            .await
            .unwrap()
            .unwrap();
        let kinesis = super::super::emulator_client(&emulator.endpoint());
        let stream = "reshards";
        create_stream(&kinesis, stream, 4).await.unwrap();
        assert_eq!(open_shards(&kinesis, stream).await.unwrap().len(), 4);
        assert!(parents(&kinesis, stream).await.unwrap().is_empty());

        let parent = split_widest(&kinesis, stream).await.unwrap();
        let open = open_shards(&kinesis, stream).await.unwrap();
        assert_eq!(open.len(), 5, "{open:?}");
        assert!(!open.contains(&parent));
        let family = parents(&kinesis, stream).await.unwrap();
        let children = family
            .iter()
            .filter(|(_, p)| **p == [parent.clone()])
            .count();
        assert_eq!(children, 2, "{family:?}");

        let (a, b) = merge_adjacent(&kinesis, stream).await.unwrap();
        let open = open_shards(&kinesis, stream).await.unwrap();
        assert_eq!(open.len(), 4, "{open:?}");
        let family = parents(&kinesis, stream).await.unwrap();
        assert!(
            family.values().any(|p| p.contains(&a) && p.contains(&b)),
            "{family:?}"
        );

        update_shard_count(&kinesis, stream, 8).await.unwrap();
        let open = open_shards(&kinesis, stream).await.unwrap();
        assert_eq!(open.len(), 8, "{open:?}");
    }
}
