//! The stage's reshard actions on kinesis-local (SplitShard, MergeShards,
//! UpdateShardCount), each printed as the story goes, through the calls of
//! [`reshard`].

use super::super::report::short;
use super::super::{DemoError, STREAM};
use super::Stage;
use shardring_devkit::stream::reshard;

impl Stage {
    /// The open shard with the widest hash key range (the next to split).
    pub async fn widest_open(&self) -> Result<reshard::StreamShard, DemoError> {
        Ok(reshard::widest_open(&self.kinesis, STREAM).await?)
    }

    /// SplitShard of `parent` in half.
    pub async fn split(&self, parent: &reshard::StreamShard) -> Result<(), DemoError> {
        reshard::split_in_half(&self.kinesis, STREAM, parent).await?;
        println!("  SplitShard {}", short(&parent.id));
        Ok(())
    }

    /// MergeShards of the first two adjacent open shards.
    pub async fn merge_adjacent(&self) -> Result<(String, String), DemoError> {
        let (a, b) = reshard::merge_adjacent(&self.kinesis, STREAM).await?;
        println!("  MergeShards {} + {}", short(&a), short(&b));
        Ok((a, b))
    }

    /// UpdateShardCount to `target` (uniform scaling).
    pub async fn update_shard_count(&self, target: u32) -> Result<(), DemoError> {
        reshard::update_shard_count(&self.kinesis, STREAM, target).await?;
        println!("  UpdateShardCount to {target}");
        Ok(())
    }
}
