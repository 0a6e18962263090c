#!/usr/bin/env bash
# Runs every test of the workspace from a fresh clone, in one command:
#   ./scripts/test.sh [extra `cargo test` arguments]
# 1. installs the pinned local AWS stand-ins (kinesis-local, dynalite) into
#    e2e/node_modules with `npm ci` when they are missing;
# 2. builds all test targets once, then runs them. The end-to-end tests in
#    e2e/ skip (and say so) when no cluster is reachable through KUBECONFIG;
#    the manifest drift tests need kubectl on PATH (or $KUBECTL).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! npm ls --prefix e2e --depth=0 >/dev/null 2>&1; then
  echo "== installing the local AWS emulators into e2e/node_modules (npm ci)"
  npm ci --prefix e2e --no-audit --no-fund
fi

echo "== cargo build --tests --workspace"
cargo build --tests --workspace
echo "== cargo test --workspace"
cargo test --workspace --no-fail-fast "$@"
