//! `shardring topology`: lists a Kinesis stream's shards with ListShards (and,
//! given a KCL lease table, each shard's lease owner and checkpoint) and
//! prints the shard tree as JSON or as an indented table. It uses the same
//! reader, lease reader and lifecycle as the operator, so what it prints is
//! what a ShardGroup would see.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Serialize;

use crate::engine::{HashKeyRange, ShardState};
use crate::lease_table::{Checkpoint, LeaseTable, LeaseTableReader, dynamodb_client};
use crate::source::kinesis::lifecycle::{self, LifecycleMemory};
use crate::source::kinesis::reader::emulator_credentials;
use crate::source::kinesis::{
    ReaderOptions, StreamId, StreamTopology, TopologyReader, kinesis_client,
};

/// Arguments of `shardring topology`.
#[derive(Debug, clap::Args)]
pub struct TopologyArgs {
    /// Stream name (or a stream ARN).
    #[arg(long)]
    pub stream: String,
    /// AWS region; default from the AWS chain (AWS_REGION, profile, IMDS).
    #[arg(long, env = "AWS_REGION")]
    pub region: Option<String>,
    /// Kinesis endpoint URL override (VPC endpoint, local emulator). For a
    /// loopback endpoint without AWS credentials, dummy ones are used.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// KCL lease table to read owners, checkpoints and completion from.
    #[arg(long)]
    pub lease_table: Option<String>,
    /// DynamoDB endpoint URL override for the lease table.
    #[arg(long, requires = "lease_table")]
    pub lease_endpoint: Option<String>,
    /// ListShards page size (MaxResults, 1 to 10000); default: the service's.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=10000))]
    pub page_size: Option<i32>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// How `shardring topology` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `{"shards": [{"id", "state", "parents", "hashKeyRange", "leaseOwner", "checkpoint"}]}`.
    Json,
    /// The shard tree, one shard per line, children indented under parents.
    Table,
}

/// One shard in the JSON output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ShardLine {
    /// Shard id.
    pub id: String,
    /// `open`, `closed` or `complete`.
    pub state: &'static str,
    /// Parent shard ids.
    pub parents: Vec<String>,
    /// Hash key range (decimal strings).
    pub hash_key_range: Option<HashKeyRange>,
    /// Lease owner (with a lease table).
    pub lease_owner: Option<String>,
    /// Checkpoint: a sequence number or a KCL sentinel (with a lease table).
    pub checkpoint: Option<String>,
}

/// The JSON document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TopologyOutput {
    /// Shards in tree order.
    pub shards: Vec<ShardLine>,
}

fn is_loopback(endpoint: &str) -> bool {
    let authority = endpoint.split("://").nth(1).unwrap_or(endpoint);
    if authority.starts_with("[::1]") {
        return true;
    }
    let host = authority.split(['/', ':']).next().unwrap_or("");
    host == "localhost" || host.starts_with("127.")
}

/// Runs the command.
pub async fn run(args: TopologyArgs) -> anyhow::Result<ExitCode> {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    let local = args
        .endpoint
        .iter()
        .chain(args.lease_endpoint.iter())
        .all(|e| is_loopback(e))
        && args.endpoint.is_some()
        && std::env::var_os("AWS_ACCESS_KEY_ID").is_none();
    if local {
        loader = loader.credentials_provider(emulator_credentials());
    }
    let base = loader.load().await;
    let stream = match args.stream.rsplit_once(":stream/") {
        Some((_, name)) if args.stream.starts_with("arn:") => StreamId {
            name: name.to_owned(),
            arn: Some(args.stream.clone()),
        },
        _ => StreamId::named(&args.stream),
    };
    let region = args.region.as_deref().or_else(|| {
        args.stream
            .split(':')
            .nth(3)
            .filter(|_| stream.arn.is_some())
    });
    let options = ReaderOptions {
        page_size: args.page_size,
        ..ReaderOptions::default()
    };
    let reader = TopologyReader::new(
        kinesis_client(&base, region, args.endpoint.as_deref()),
        stream.clone(),
        options,
        None,
    );
    let topology = reader
        .list()
        .await
        .with_context(|| format!("listing the shards of {}", stream.name))?;
    let leases = match &args.lease_table {
        None => None,
        Some(table) => {
            let client = dynamodb_client(&base, region, args.lease_endpoint.as_deref());
            let lease_reader =
                LeaseTableReader::new(client, table, Some(stream.name.clone()), None);
            let table = lease_reader
                .read(jiff::Timestamp::now())
                .await
                .with_context(|| format!("reading lease table {table}"))?;
            Some(table)
        }
    };
    let output = build_output(&topology, leases.as_ref());
    let printed = match args.format {
        Format::Json => serde_json::to_string_pretty(&output)? + "\n",
        Format::Table => table(&output, leases.is_some()),
    };
    print!("{printed}");
    Ok(ExitCode::SUCCESS)
}

/// Builds the output in tree order: roots (no listed parent) in list order,
/// each followed by its descendants; a merged child follows its first
/// listed parent.
pub(crate) fn build_output(
    topology: &StreamTopology,
    leases: Option<&LeaseTable>,
) -> TopologyOutput {
    let mut memory = LifecycleMemory::default();
    let life = lifecycle::derive(&topology.shards, leases, leases.is_some(), &mut memory);
    let states: BTreeMap<&str, ShardState> = life
        .shards
        .iter()
        .map(|s| (s.id.as_str(), s.state))
        .collect();
    let listed: BTreeSet<&str> = topology.shards.iter().map(|s| s.id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut roots = Vec::new();
    for (index, shard) in topology.shards.iter().enumerate() {
        match shard.parents().iter().find(|p| listed.contains(p.as_str())) {
            Some(parent) => children
                .entry(
                    topology
                        .shards
                        .iter()
                        .find(|s| &s.id == parent)
                        .map_or("", |s| s.id.as_str()),
                )
                .or_default()
                .push(index),
            None => roots.push(index),
        }
    }
    let mut order = Vec::new();
    let mut stack: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(index) = stack.pop() {
        order.push(index);
        if let Some(kids) = children.get(topology.shards[index].id.as_str()) {
            stack.extend(kids.iter().rev());
        }
    }
    let shards = order
        .into_iter()
        .map(|index| {
            let shard = &topology.shards[index];
            let lease = leases.and_then(|table| table.get(&shard.id));
            ShardLine {
                id: shard.id.clone(),
                state: match states.get(shard.id.as_str()) {
                    Some(ShardState::Complete) => "complete",
                    Some(ShardState::Closed) => "closed",
                    _ => "open",
                },
                parents: shard.parents(),
                hash_key_range: shard.hash_key_range.clone(),
                lease_owner: lease.and_then(|l| l.owner.clone()),
                checkpoint: lease.and_then(|l| {
                    l.sequence_number
                        .clone()
                        .or_else(|| l.checkpoint.map(|kind| kind.as_str().to_owned()))
                }),
            }
        })
        .collect();
    TopologyOutput { shards }
}

/// Share of the 128-bit key space, in percent.
fn key_share(range: &HashKeyRange) -> Option<f64> {
    let start: u128 = range.start.parse().ok()?;
    let end: u128 = range.end.parse().ok()?;
    let width = end.checked_sub(start)? as f64 + 1.0;
    Some(width / 2f64.powi(128) * 100.0)
}

fn depth(line: &ShardLine, lines: &[ShardLine]) -> usize {
    let mut depth = 0;
    let mut current = line;
    while let Some(parent) = current
        .parents
        .iter()
        .find_map(|p| lines.iter().find(|l| &l.id == p))
    {
        depth += 1;
        current = parent;
        if depth > lines.len() {
            break;
        }
    }
    depth
}

fn table(output: &TopologyOutput, with_leases: bool) -> String {
    let mut text = String::new();
    let mut header = format!("{:<40} {:<9} {:>8}", "SHARD", "STATE", "KEYS %");
    if with_leases {
        header.push_str(&format!("  {:<24} CHECKPOINT", "LEASE OWNER"));
    }
    let _ = writeln!(text, "{}", header.trim_end());
    for line in &output.shards {
        let indent = depth(line, &output.shards);
        let name = format!("{}{}", "  ".repeat(indent), line.id);
        let share = line
            .hash_key_range
            .as_ref()
            .and_then(key_share)
            .map_or("-".to_owned(), |s| format!("{s:.2}"));
        let mut row = format!("{name:<40} {:<9} {share:>8}", line.state);
        if with_leases {
            let checkpoint = line
                .checkpoint
                .as_deref()
                .map(shorten)
                .unwrap_or_else(|| "-".to_owned());
            row.push_str(&format!(
                "  {:<24} {checkpoint}",
                line.lease_owner.as_deref().unwrap_or("-")
            ));
        }
        if line.parents.len() > 1 {
            // The tree shows a merged shard under its first parent only.
            let _ = write!(row, "  (merge of {})", line.parents.join(" + "));
        }
        let _ = writeln!(text, "{}", row.trim_end());
    }
    let open = output.shards.iter().filter(|s| s.state == "open").count();
    let _ = writeln!(text, "{} shards, {open} open", output.shards.len());
    text
}

/// Long sequence numbers are shown by their last digits.
fn shorten(checkpoint: &str) -> String {
    if checkpoint.len() > 16
        && Checkpoint::parse(checkpoint).is_some_and(|c| matches!(c, Checkpoint::Sequence(_)))
    {
        format!("…{}", &checkpoint[checkpoint.len() - 12..])
    } else {
        checkpoint.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kinesis::KinesisShard;

    fn shard(id: &str, parents: &[&str], closed: bool, range: (&str, &str)) -> KinesisShard {
        KinesisShard {
            id: id.to_owned(),
            parent: parents.first().map(|p| (*p).to_owned()),
            adjacent_parent: parents.get(1).map(|p| (*p).to_owned()),
            hash_key_range: Some(HashKeyRange {
                start: range.0.to_owned(),
                end: range.1.to_owned(),
            }),
            closed,
        }
    }

    #[test]
    fn tree_order_puts_children_under_parents_and_json_has_the_contract_fields() {
        let max = u128::MAX.to_string();
        let half = (u128::MAX / 2).to_string();
        let half1 = (u128::MAX / 2 + 1).to_string();
        let topology = StreamTopology {
            shards: vec![
                shard("s0", &[], true, ("0", &max)),
                shard("s2", &["s0"], false, (&half1, &max)),
                shard("s1", &["s0"], false, ("0", &half)),
            ],
            read_at: tokio::time::Instant::now(),
            read_at_wall: jiff::Timestamp::UNIX_EPOCH,
            calls: 1,
        };
        let output = build_output(&topology, None);
        let ids: Vec<&str> = output.shards.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, vec!["s0", "s2", "s1"]);
        let json = serde_json::to_value(&output).expect("serialises");
        let first = &json["shards"][1];
        assert_eq!(first["state"], "open");
        assert_eq!(first["parents"], serde_json::json!(["s0"]));
        assert_eq!(first["hashKeyRange"]["end"], serde_json::json!(max));
        assert!(first["leaseOwner"].is_null() && first["checkpoint"].is_null());
        let printed = table(&output, false);
        assert!(printed.contains("  s2"), "{printed}");
        assert!(printed.contains("100.00"), "{printed}");
        assert!(printed.contains("50.00"), "{printed}");
    }

    #[test]
    fn merged_shards_name_both_parents() {
        let topology = StreamTopology {
            shards: vec![
                shard("a", &[], true, ("0", "9")),
                shard("b", &[], true, ("10", "19")),
                shard("m", &["a", "b"], false, ("0", "19")),
            ],
            read_at: tokio::time::Instant::now(),
            read_at_wall: jiff::Timestamp::UNIX_EPOCH,
            calls: 1,
        };
        let printed = table(&build_output(&topology, None), false);
        assert!(
            printed.contains("  m ") && printed.contains("(merge of a + b)"),
            "{printed}"
        );
    }

    #[test]
    fn loopback_endpoints() {
        assert!(is_loopback("http://127.0.0.1:4568"));
        assert!(is_loopback("http://localhost:4568/"));
        assert!(!is_loopback("https://kinesis.us-east-1.amazonaws.com"));
    }
}
