//! `shardring-dev plan`: runs the assignment engine on a YAML or JSON scenario
//! file and prints the result as JSON (the contract other tools parse) or as
//! a per-pod table with a balance summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use shardring_engine::{PlanError, PlanInput, PlanOutput, model::range_weight};

/// Arguments of `shardring-dev plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Scenario file (YAML or JSON): options, shards, pods, previous.
    #[arg(long, short)]
    pub input: PathBuf,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Format::Json)]
    pub format: Format,
}

/// How `shardring-dev plan` prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `{"assignment", "pending", "unassigned", "loads", "moves"}`.
    Json,
    /// A per-pod table and a balance summary.
    Table,
}

/// Runs the command.
pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.input)
        .with_context(|| format!("reading {}", args.input.display()))?;
    let input = parse(&text).with_context(|| format!("in {}", args.input.display()))?;
    let output = shardring_engine::plan(&input).map_err(|error| {
        let line = culprit_line(&text, &error).map_or(String::new(), |l| format!(" (line {l})"));
        anyhow::anyhow!("in {}: {error}{line}", args.input.display())
    })?;
    let printed = match args.format {
        Format::Json => serde_json::to_string_pretty(&output)? + "\n",
        Format::Table => table(&input, &output),
    };
    print!("{printed}");
    Ok(ExitCode::SUCCESS)
}

/// Parses a scenario. JSON goes through serde_json first (much faster on
/// large files); any failure is reported through serde_yaml, whose errors
/// name the field path, line and column.
pub fn parse(text: &str) -> anyhow::Result<PlanInput> {
    if text.trim_start().starts_with('{')
        && let Ok(input) = serde_json::from_str(text)
    {
        return Ok(input);
    }
    serde_yaml::from_str(text).map_err(|error| {
        // serde_yaml's message carries the path ("shards[1].state: ...") and
        // usually "at line L column C"; add the line when it does not.
        let message = error.to_string();
        match error.location() {
            Some(at) if !message.contains("line") => {
                anyhow::anyhow!("{message} (line {}, column {})", at.line(), at.column())
            }
            _ => anyhow::anyhow!(message),
        }
    })
}

/// The line of the scenario an engine error is about: the second mention of
/// a duplicated id or name, the first mention of a shard with a bad range.
pub(crate) fn culprit_line(text: &str, error: &PlanError) -> Option<usize> {
    let (needle, nth) = match error {
        PlanError::DuplicateShard(id) | PlanError::DuplicatePod(id) => (id, 2),
        PlanError::BadHashKeyRange { shard, .. } => (shard, 1),
        PlanError::UnknownLoad(shard) => (shard, 1),
        PlanError::ZeroCapacity(pod) => (pod, 1),
        PlanError::EmptyName(_) | PlanError::TooMany(..) | PlanError::BadBand(_) => return None,
    };
    let quoted = |line: &str| {
        line.match_indices(needle.as_str()).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + needle.len()..].chars().next();
            let edge = |c: Option<char>| {
                c.is_none_or(|c| !(c.is_alphanumeric() || c == '-' || c == '_' || c == '.'))
            };
            edge(before) && edge(after)
        })
    };
    text.lines()
        .enumerate()
        .filter(|(_, line)| quoted(line))
        .nth(nth - 1)
        .map(|(at, _)| at + 1)
}

/// The per-pod table and balance summary.
pub fn table(input: &PlanInput, output: &PlanOutput) -> String {
    let ranged = input.options.balance.weighs_key_space();
    // Key-space share per pod (hashRange mode), in units of 2^64 keys.
    let mut keyspace: BTreeMap<&str, u128> = BTreeMap::new();
    let mut standby: BTreeMap<&str, u64> = BTreeMap::new();
    let range_of: BTreeMap<&str, u128> = input
        .shards
        .iter()
        .filter_map(|s| {
            let r = s.hash_key_range.as_ref()?;
            Some((
                s.id.as_str(),
                u128::from(range_weight(&r.start, &r.end).ok()?),
            ))
        })
        .collect();
    for (id, a) in output.assignment.iter() {
        if let Some(owner) = &a.owner {
            *keyspace.entry(owner).or_default() += range_of.get(id.as_str()).copied().unwrap_or(0);
        }
        for s in &a.standbys {
            *standby.entry(s).or_default() += 1;
        }
    }
    let space = (u64::MAX as f64) + 1.0;
    let mut pods: Vec<&shardring_engine::Pod> = input.pods.iter().collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    let width = pods.iter().map(|p| p.name.len()).max().unwrap_or(3).max(3);
    let mut out = String::new();
    let _ = write!(
        out,
        "{:<width$}  {:<8}  {:<10}  {:<10}  {:>8}  {:>6}  {:>7}",
        "POD", "STATE", "ZONE", "NODE", "CAPACITY", "SHARDS", "STANDBY"
    );
    if ranged {
        out.push_str("  KEYSPACE");
    }
    let throughput = output.throughput.as_ref();
    if throughput.is_some() {
        out.push_str("  LOAD(B/s)  ÷FAIR");
    }
    out.push('\n');
    for pod in &pods {
        let state = if pod.terminating {
            "draining"
        } else if !pod.ready {
            "unready"
        } else {
            "eligible"
        };
        let shards = output
            .loads
            .get(&pod.name)
            .map_or("-".to_owned(), |l| l.to_string());
        let _ = write!(
            out,
            "{:<width$}  {:<8}  {:<10}  {:<10}  {:>8}  {:>6}  {:>7}",
            pod.name,
            state,
            pod.zone.as_deref().unwrap_or("-"),
            pod.node.as_deref().unwrap_or("-"),
            pod.capacity,
            shards,
            standby.get(pod.name.as_str()).copied().unwrap_or(0),
        );
        if ranged {
            let share = keyspace.get(pod.name.as_str()).copied().unwrap_or(0) as f64 / space;
            let _ = write!(out, "  {:>7.2}%", share * 100.0);
        }
        if let Some(report) = throughput {
            match report.pods.get(&pod.name) {
                Some(load) => {
                    let ratio = load.ratio_permille() as f64 / 1000.0;
                    let _ = write!(out, "  {:>9}  {ratio:>5.2}", load.load);
                }
                None => out.push_str("          -      -"),
            }
        }
        out.push('\n');
    }
    let assigned: u64 = output.loads.values().sum();
    let min = output.loads.values().min().copied().unwrap_or(0);
    let max = output.loads.values().max().copied().unwrap_or(0);
    let eligible = output.loads.len();
    let fair = if eligible == 0 {
        0.0
    } else {
        assigned as f64 / eligible as f64
    };
    let _ = writeln!(
        out,
        "\nbalance: {assigned} shards on {eligible} eligible pods, fair share {fair:.2}, min {min}, max {max}, max-min {}",
        max - min
    );
    if let Some(report) = throughput
        && let Some((min, max)) = report.spread_permille()
    {
        let _ = writeln!(
            out,
            "throughput: load ÷ fair share {:.2} to {:.2} (band ±{}%); {} pods were outside the band, {} still are; {} shards moved for it",
            min as f64 / 1000.0,
            max as f64 / 1000.0,
            input
                .options
                .band_percent
                .unwrap_or(shardring_engine::DEFAULT_BAND_PERCENT),
            report.out_of_band,
            report.still_out_of_band,
            report.moves
        );
    }
    if ranged && eligible > 0 {
        let total: u128 = keyspace.values().sum();
        let capacity: u64 = pods
            .iter()
            .filter(|p| output.loads.contains_key(&p.name))
            .map(|p| u64::from(p.capacity))
            .sum();
        // Largest excess over the capacity-weighted fair share, in % of the
        // assigned key space.
        let worst = pods
            .iter()
            .filter(|p| output.loads.contains_key(&p.name))
            .map(|p| {
                let held = keyspace.get(p.name.as_str()).copied().unwrap_or(0) as f64;
                let fair = total as f64 * f64::from(p.capacity) / capacity as f64;
                (held - fair) / total.max(1) as f64 * 100.0
            })
            .fold(f64::MIN, f64::max);
        let _ = writeln!(
            out,
            "key space: fair share {:.2}% per capacity unit, largest excess over fair share {:+.2}%",
            100.0 / capacity as f64,
            worst
        );
    }
    let _ = writeln!(
        out,
        "moves: {} (required {}, optional {}); pending: {}; unassigned: {}",
        output.moves,
        output.required_moves(),
        output.optional_moves(),
        output.pending.len(),
        output.unassigned.len()
    );
    for (label, list) in [
        ("pending", &output.pending),
        ("unassigned", &output.unassigned),
    ] {
        if !list.is_empty() {
            let shown: Vec<&str> = list.iter().take(10).map(String::as_str).collect();
            let more = if list.len() > 10 {
                format!(" (+{} more)", list.len() - 10)
            } else {
                String::new()
            };
            let _ = writeln!(out, "{label}: {}{more}", shown.join(", "));
        }
    }
    out
}
