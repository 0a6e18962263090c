#!/usr/bin/env bash
# Regenerates the packaging files derived from other committed sources:
#   - deploy/helm/shardring/crds/: copies of config/crd/bases/ (Helm installs
#     CRDs from a chart's crds/ directory);
#   - deploy/install.yaml: `kubectl kustomize config/default`;
#   - deploy/helm/shardring/files/alerts.yaml and dashboard.json: copies of
#     config/monitoring/alerts.yaml and dashboard.json (Helm reads only
#     files inside the chart).
# Run it after changing the CRDs (regenerated first with
# `SHARDRING_UPDATE_GOLDEN=1 cargo test -p shardring-crds`), config/rbac or
# config/manager; `cargo test -p shardring --test it manifests::` fails until
# you do. After changing the alert rules, `cargo test -p shardring-ops --test
# it alerts::` fails until you do.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rm -f deploy/helm/shardring/crds/*.yaml
for file in config/crd/bases/*.yaml; do
  cp "$file" deploy/helm/shardring/crds/
done
mkdir -p deploy/helm/shardring/files
cp config/monitoring/alerts.yaml deploy/helm/shardring/files/alerts.yaml
cp config/monitoring/dashboard.json deploy/helm/shardring/files/dashboard.json
"${KUBECTL:-kubectl}" kustomize config/default > deploy/install.yaml
echo "regenerated deploy/helm/shardring/crds/, deploy/helm/shardring/files/ and deploy/install.yaml"
