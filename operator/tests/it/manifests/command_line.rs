//! The manager's command line in `config/manager` and in the chart's
//! Deployment template, parsed by `shardring run`'s own argument parser: only
//! flags and environment variables the binary accepts.

use serde_yaml::Value;

use super::{read, root, yaml};

/// `shardring run`'s arguments as a parser of their own, to check the
/// manifests' command lines against the real CLI.
#[derive(Debug, clap::Parser)]
struct Run {
    #[command(flatten)]
    args: shardring::cli::run::RunArgs,
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
    use clap::Parser as _;
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
    let parsed =
        Run::try_parse_from(std::iter::once("shardring-run").chain(args[1..].iter().copied()))
            .unwrap_or_else(|error| {
                panic!("config/manager/manager.yaml args do not parse: {error}")
            });
    assert!(
        parsed.args.leader_election,
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
    let mut flags = 0;
    for line in template.lines().map(str::trim) {
        if let Some(flag) = line.strip_prefix("- --") {
            let name = flag.split('=').next().unwrap_or_default();
            assert!(
                longs.iter().any(|long| long == name),
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
