# The tasks a contributor runs, by name: `just --list`. Optional: CI does not
# use just (.ci/run calls the same scripts and cargo commands directly), and
# every recipe is one command you can copy from here.

set shell := ["bash", "-euo", "pipefail", "-c"]
set positional-arguments

# List the recipes.
default:
    @{{ just_executable() }} --list --unsorted

# Every test of the workspace, as CI runs it (installs the local AWS emulators and helm when missing); extra arguments go to `cargo test`.
test *args:
    ./scripts/test.sh "$@"

# The end-to-end scenarios (they skip without a cluster reachable through KUBECONFIG).
e2e *args:
    cargo test -p shardring-e2e "$@"

# Formatting and clippy, as CI checks them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

# Regenerate the committed CRD YAML (config/crd/bases/) from the types, as the drift test (`cargo test -p shardring-crds --test it generated::`) expects it.
crds:
    cargo run -p shardring -- crds --write config/crd/bases

# Regenerate every committed file the API crate checks: CRDs, JSON Schemas of the consumer contract, golden documents.
golden:
    SHARDRING_UPDATE_GOLDEN=1 cargo test -p shardring-crds

# Copy the CRDs into the Helm chart and re-render deploy/install.yaml (needs kubectl); `cargo test -p shardring --test it manifests::` checks them.
manifests:
    ./scripts/generate.sh

# A benchmark of the operator crate (apiserver_scale by default; also publish, engine, compare).
bench name="apiserver_scale":
    cargo bench -p shardring --bench {{ name }}

# The whole system locally on emulated Kinesis and DynamoDB, ending in the checker's verdict.
demo *args:
    cargo run -p shardring-dev -- demo "$@"

# Build the operator image FROM scratch and start it as uid 65532 on a read-only root against the mock API server (SHARDRING_IMAGE_BINARY=path skips the release build).
image-check:
    ./scripts/image-check.sh
