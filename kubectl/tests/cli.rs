//! The plugin's command line as kubectl runs it (`kubectl-shardring` from
//! PATH): its four commands are there, and without a cluster it fails with
//! an error that says what it tried. Against a real cluster it is run by
//! the e2e test `kubectl_plugin::`.

use std::process::Command;

fn plugin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-shardring"))
}

#[test]
fn help_lists_the_four_commands() {
    let out = plugin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for command in ["status", "why", "plan", "top"] {
        assert!(text.contains(command), "{command} missing from:\n{text}");
    }
}

#[test]
fn without_a_cluster_it_says_what_it_tried() {
    let dir = std::env::temp_dir().join(format!("kubectl-shardring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("missing-kubeconfig");
    let out = plugin()
        .arg("status")
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("connecting to the Kubernetes API (KUBECONFIG or in-cluster)"),
        "{text}"
    );
}
