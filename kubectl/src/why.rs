//! `kubectl shardring why SHARD`: where a shard is and why, from its
//! group's published document (owner, state, standbys, a handoff in flight
//! and since when, a hold for a returning pod, its parents and checkpoint),
//! then what happened to it lately: its entries among the group's last
//! completed handoffs (`status.recentHandoffs`: from, to, the evidence that
//! the previous owner let go, how long it took).

use std::time::Duration;

use kube::ResourceExt;
use shardring::controller::snapshot::Snapshot;
use shardring_crds::{ShardGroup, ShardRecord};

/// What the document says of `shard` (`record`) in `group`.
fn describe(group: &ShardGroup, epoch: u64, shard: &str, record: &ShardRecord) -> String {
    let mut out = format!(
        "shard {shard} of ShardGroup {}/{} (document epoch {epoch})\n",
        group.namespace().unwrap_or_default(),
        group.name_any()
    );
    out.push_str(&format!(
        "  state:     {:?}\n  owner:     {}\n",
        record.state,
        record.owner.as_deref().unwrap_or("none")
    ));
    if !record.standbys.is_empty() {
        out.push_str(&format!("  standbys:  {}\n", record.standbys.join(", ")));
    }
    if let Some(handoff) = &record.handoff {
        out.push_str(&format!(
            "  handoff:   revoked from {} at epoch {} since {}, to {}{}\n",
            record.owner.as_deref().unwrap_or("none"),
            handoff.epoch,
            handoff.since,
            handoff
                .to
                .as_deref()
                .unwrap_or("no pod yet (none has room)"),
            handoff
                .lease_counter
                .map(|c| format!("; the lease counter read {c} at the revoke"))
                .unwrap_or_default()
        ));
    }
    if let Some(hold) = &record.return_hold {
        out.push_str(&format!(
            "  held:      for {} (away since {}) until {}; then it moves\n",
            record.owner.as_deref().unwrap_or("its owner"),
            hold.since,
            hold.until
        ));
    }
    if !record.parents.is_empty() {
        out.push_str(&format!("  parents:   {}\n", record.parents.join(", ")));
    }
    if let Some(checkpoint) = &record.checkpoint {
        out.push_str(&format!("  checkpoint handed over: {checkpoint}\n"));
    }
    out
}

/// The `why` text for `shard` (in `group`, or in every group that has it).
///
/// # Errors
/// When no group has the shard.
pub fn render(snapshot: &Snapshot, shard: &str, group: Option<&str>) -> anyhow::Result<String> {
    let candidates: Vec<&ShardGroup> = match group {
        Some(name) => vec![snapshot.group(name).ok_or_else(|| {
            anyhow::anyhow!("no ShardGroup {name} in namespace {}", snapshot.namespace())
        })?],
        None => snapshot.groups().iter().collect(),
    };
    let mut out = String::new();
    for group in candidates {
        let Some(document) = snapshot.document(group) else {
            continue;
        };
        let Some(record) = document.shards.get(shard) else {
            continue;
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&describe(group, document.epoch, shard, record));
        let recent = group
            .status
            .as_ref()
            .map(|s| s.recent_handoffs.as_slice())
            .unwrap_or_default();
        let mine: Vec<_> = recent.iter().filter(|h| h.shard == shard).collect();
        if mine.is_empty() {
            out.push_str(&format!(
                "  not among the group's last {} handoffs (status.recentHandoffs)\n",
                recent.len()
            ));
        } else {
            out.push_str("  its recent handoffs, newest first (status.recentHandoffs):\n");
            for handoff in mine {
                out.push_str(&format!(
                    "    {}  {} → {}  evidence {}, {:.1} s after the revoke\n",
                    handoff.completed,
                    handoff.from,
                    handoff.to.as_deref().unwrap_or("none (no pod had room)"),
                    handoff.evidence,
                    Duration::from_millis(handoff.millis).as_secs_f64()
                ));
            }
        }
    }
    if out.is_empty() {
        anyhow::bail!(
            "no published document in namespace {} has a shard {shard}{}",
            snapshot.namespace(),
            group
                .map(|g| format!(" (ShardGroup {g})"))
                .unwrap_or_default()
        );
    }
    Ok(out)
}
