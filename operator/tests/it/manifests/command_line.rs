//! The manager's command line in `config/manager` and in the chart's
//! Deployment template, parsed by `shardring run`'s own argument parser: only
//! flags and environment variables the binary accepts.
//!
//! The consumer endpoint's flags (issue 13) are written into the manifests
//! before `shardring run` parses them: until `RunArgs` has `--no-endpoint`,
//! exactly the flags in [`ENDPOINT_FLAGS`] are let through unparsed; from then
//! on every flag must parse, and the list only names what the manifests may
//! use.

use serde_yaml::Value;

use super::{read, root, yaml};

/// `shardring run`'s arguments as a parser of their own, to check the
/// manifests' command lines against the real CLI.
#[derive(Debug, clap::Parser)]
struct Run {
    #[command(flatten)]
    args: shardring::cli::run::RunArgs,
}

/// The consumer endpoint's flags of `shardring run` (issue 13), by long name.
pub(super) const ENDPOINT_FLAGS: [&str; 11] = [
    "endpoint-addr",
    "no-endpoint",
    "endpoint-tls-dir",
    "endpoint-dns-name",
    "endpoint-audience",
    "endpoint-no-peer-ip-check",
    "endpoint-token-cache-ttl",
    "endpoint-ip-limit",
    "endpoint-pod-limit",
    "endpoint-rate-window",
    "endpoint-max-connections",
];

/// Whether `shardring run` parses the endpoint's flags yet (it has
/// `--no-endpoint`). Until then the manifests' endpoint flags are checked by
/// name against [`ENDPOINT_FLAGS`] only.
pub(super) fn endpoint_cli_landed() -> bool {
    run_flags_and_env()
        .0
        .iter()
        .any(|long| long == "no-endpoint")
}

/// `args` without the endpoint's flags (and a value given as the next
/// argument) when `shardring run` does not parse them yet; unchanged once it
/// does.
pub(super) fn parseable_run_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    if endpoint_cli_landed() {
        return args.to_vec();
    }
    let mut kept = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let Some(flag) = arg.strip_prefix("--") else {
            kept.push(*arg);
            continue;
        };
        let (name, inline_value) = match flag.split_once('=') {
            Some((name, _)) => (name, true),
            None => (flag, false),
        };
        if ENDPOINT_FLAGS.contains(&name) {
            let is_switch = name == "no-endpoint" || name == "endpoint-no-peer-ip-check";
            skip_value = !inline_value && !is_switch;
        } else {
            kept.push(*arg);
        }
    }
    kept
}

/// Parses a manifest's `run` arguments (without `run`) as `shardring run`
/// does.
pub(super) fn parse_run_args(args: &[&str], what: &str) -> shardring::cli::run::RunArgs {
    use clap::Parser as _;
    let args = parseable_run_args(args);
    Run::try_parse_from(std::iter::once("shardring-run").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("{what}: the args do not parse as `shardring run`: {error}"))
        .args
}

#[test]
fn endpoint_flags_are_set_aside_only_until_run_parses_them() {
    let args = [
        "--leader-election",
        "--endpoint-audience=shardring.io",
        "--endpoint-ip-limit",
        "20",
        "--no-endpoint",
        "--log-format=json",
    ];
    let kept = parseable_run_args(&args);
    if endpoint_cli_landed() {
        assert_eq!(kept, args);
    } else {
        assert_eq!(kept, ["--leader-election", "--log-format=json"]);
    }
}

/// The default value of `shardring run`'s flag `--long`, if it has one.
pub(super) fn run_flag_default(long: &str) -> Option<String> {
    use clap::CommandFactory as _;
    let command = Run::command();
    let arg = command
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long))?;
    arg.get_default_values()
        .first()
        .map(|value| value.to_string_lossy().into_owned())
}

/// Long flags and environment variables that `shardring run` accepts.
fn run_flags_and_env() -> (Vec<String>, Vec<String>) {
    use clap::CommandFactory as _;
    let command = Run::command();
    let longs = command
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(str::to_owned))
        .collect();
    let envs = command
        .get_arguments()
        .filter_map(|arg| arg.get_env().map(|env| env.to_string_lossy().into_owned()))
        .collect();
    (longs, envs)
}

#[test]
fn manager_command_line_parses_as_shardring_run() {
    let manager = yaml(
        &read(&root().join("config/manager/manager.yaml")),
        "config/manager/manager.yaml",
    );
    let container = &manager["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        args.first(),
        Some(&"run"),
        "the manager must run `shardring run`"
    );
    let parsed = parse_run_args(&args[1..], "config/manager/manager.yaml");
    assert!(
        parsed.leader_election,
        "two replicas need --leader-election"
    );
    let (_, envs) = run_flags_and_env();
    for env in container["env"].as_sequence().expect("env") {
        let name = env["name"].as_str().unwrap_or_default();
        if name.starts_with("SHARDRING_") {
            assert!(
                envs.iter().any(|known| known == name),
                "`shardring run` reads no env {name}"
            );
        }
    }
}

#[test]
fn chart_command_line_uses_shardring_run_flags() {
    let template = read(&root().join("deploy/helm/shardring/templates/deployment.yaml"));
    let (longs, envs) = run_flags_and_env();
    let landed = endpoint_cli_landed();
    let mut flags = 0;
    for line in template.lines().map(str::trim) {
        if let Some(flag) = line.strip_prefix("- --") {
            let name = flag.split('=').next().unwrap_or_default();
            assert!(
                longs.iter().any(|long| long == name)
                    || (!landed && ENDPOINT_FLAGS.contains(&name)),
                "the chart passes --{name}, unknown to `shardring run`"
            );
            flags += 1;
        }
        if let Some(name) = line
            .strip_prefix("- name: ")
            .filter(|name| name.starts_with("SHARDRING_"))
        {
            assert!(
                envs.iter().any(|known| known == name),
                "the chart sets {name}, unknown to `shardring run`"
            );
        }
    }
    assert!(
        flags >= 2,
        "found only {flags} flags in the chart's Deployment; is the scanner broken?"
    );
}
