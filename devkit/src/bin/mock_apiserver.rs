//! `shardring-mock-apiserver`: the devkit's mock Kubernetes API server as a
//! process, for checks that run the operator outside a test binary (the
//! image check starts the operator's container against it). It establishes
//! the shardring CRDs, creates the namespace, writes a kubeconfig for
//! itself, and serves until SIGTERM or Ctrl-C.

use std::path::PathBuf;

use clap::Parser;
use shardring_devkit::apiserver::{MockApiServer, MockOptions};
use shardring_devkit::fixtures;

/// Serves a mock Kubernetes API server over HTTPS on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "shardring-mock-apiserver")]
struct Args {
    /// Where to write the kubeconfig (written whole, then renamed into place,
    /// so a reader never sees half of it).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Namespace of the kubeconfig's context, created on start.
    #[arg(long, default_value = "default")]
    namespace: String,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let server = MockApiServer::start(MockOptions {
        namespace: args.namespace.clone(),
        ..MockOptions::default()
    })
    .await;
    server.create_many(fixtures::crds());
    if server
        .get("v1", "Namespace", None, &args.namespace)
        .is_none()
    {
        server.create(fixtures::namespace(&args.namespace));
    }
    let partial = args.kubeconfig.with_extension("partial");
    server.write_kubeconfig(&partial)?;
    std::fs::rename(&partial, &args.kubeconfig)?;
    eprintln!("shardring-mock-apiserver: serving {}", server.url());
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    Ok(())
}
