#!/usr/bin/env bash
# Builds the operator's image from what its binary links and starts it the
# way the Deployment runs it, without pulling any base image:
#   1. the binary: `cargo build -p shardring --release --locked`, exactly as
#      the Dockerfile's builder stage (or SHARDRING_IMAGE_BINARY=path);
#   2. an image of one layer holding only that binary, the shared libraries
#      `ldd` says it links (the C runtime the distroless/cc base provides),
#      the CA bundle and a passwd entry for the non-root user 65532
#      (scripts/lib/image.sh, which scripts/node-check.sh uses too);
#   3. the image loaded into docker (dockerd is started here when it is
#      installed but not running);
#   4. a mock Kubernetes API server over TLS (shardring-mock-apiserver from
#      the devkit) with the CRDs established, and the image started as UID
#      65532 with a read-only root filesystem, no capabilities and no new
#      privileges, running `shardring run --leader-election`;
#   5. checks: /healthz answers 200, /readyz turns 200 (CRDs established,
#      caches synced, leader or not), /metrics serves the shardring_ metrics,
#      the consumer endpoint answers /v1/healthz over HTTPS as the leader
#      (its self-signed fallback: no certificate is mounted), and the
#      process runs as 65532.
# Prints the image size (uncompressed and gzip-compressed). Exits non-zero on any failed step.
#
#   ./scripts/image-check.sh            # release build, as the Dockerfile
#   SHARDRING_IMAGE_BINARY=target/debug/shardring ./scripts/image-check.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

IMAGE=shardring:image-check
work=$(mktemp -d)
container=""
mock_pid=""
cleanup() {
  [[ -n "$container" ]] && docker rm -f "$container" >/dev/null 2>&1 || true
  [[ -n "$mock_pid" ]] && kill "$mock_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf '== %s\n' "$*"; }
fail() { printf 'image-check: FAILED: %s\n' "$*" >&2; exit 1; }

# --- 1. the binary --------------------------------------------------------
binary=${SHARDRING_IMAGE_BINARY:-}
if [[ -z "$binary" ]]; then
  say "cargo build -p shardring --release --locked (as the Dockerfile)"
  cargo build -p shardring --release --locked
  binary=target/release/shardring
fi
[[ -x "$binary" ]] || fail "$binary is not an executable"
cargo build -q -p shardring-devkit --bin shardring-mock-apiserver
mock_bin=target/debug/shardring-mock-apiserver

# --- 2. the image ------------------------------------------------------------
say "image from what $binary links (scripts/lib/image.sh)"
source scripts/lib/image.sh
operator_image "$binary" "$IMAGE" "$work/image.tar"
echo "   libraries: $(ldd "$binary" | grep -oE '/[^ ]+' | sort -u | tr '\n' ' ')"

# --- 3. docker ----------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null 2>&1 || fail "no Docker engine: install docker.io (apt-get install docker.io)"
  say "starting dockerd (no iptables, no bridge: the container uses the host network)"
  dockerd --iptables=false --bridge=none >"$work/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { cat "$work/dockerd.log" >&2; fail "dockerd did not start"; }
fi
say "docker load"
docker load -q -i "$work/image.tar" >/dev/null || fail "docker load of the image failed"
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
compressed=$(gzip -c "$work/image.tar" | wc -c)
binary_size=$(stat -c %s "$binary")

# --- 4. a mock API server and the container ---------------------------------
say "mock API server with the CRDs established"
"$mock_bin" --kubeconfig "$work/kubeconfig" --namespace shardring-system \
  >"$work/mock.log" 2>&1 &
mock_pid=$!
for _ in $(seq 1 100); do [[ -s "$work/kubeconfig" ]] && break; sleep 0.1; done
[[ -s "$work/kubeconfig" ]] || { cat "$work/mock.log" >&2; fail "the mock API server did not start"; }
chmod 0644 "$work/kubeconfig"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
endpoint_port=$(free_port)

say "docker run --user 65532:65532 --read-only --cap-drop ALL"
container=$(docker run -d --network host --user 65532:65532 --read-only \
  --cap-drop ALL --security-opt no-new-privileges \
  -v "$work/kubeconfig:/etc/shardring/kubeconfig:ro" \
  -e KUBECONFIG=/etc/shardring/kubeconfig -e POD_NAME=image-check-0 \
  -e POD_NAMESPACE=shardring-system \
  "$IMAGE" run --leader-election --log-format=json --metrics-addr "127.0.0.1:$port" \
  --endpoint-addr "127.0.0.1:$endpoint_port")

# --- 5. checks ------------------------------------------------------------
get() { curl -s -o "$work/body" -w '%{http_code}' "http://127.0.0.1:$port$1" 2>/dev/null || true; }
# The consumer endpoint, over TLS with its self-signed fallback (the
# certificate is not checked here: its health route needs no token).
get_endpoint() { curl -sk -o "$work/body" -w '%{http_code}' "https://127.0.0.1:$endpoint_port$1" 2>/dev/null || true; }
wait_code() {
  local path=$1 want=$2 fetch=${3:-get} code=""
  for _ in $(seq 1 150); do
    code=$("$fetch" "$path")
    [[ "$code" == "$want" ]] && return 0
    [[ "$(docker inspect -f '{{.State.Running}}' "$container")" == "true" ]] || break
    sleep 0.2
  done
  docker logs "$container" >&2 || true
  fail "GET $path answered ${code:-nothing}, want $want"
}
wait_code /healthz 200
wait_code /readyz 200
wait_code /metrics 200
grep -q '^shardring_' "$work/body" || fail "/metrics has no shardring_ metrics"
wait_code /v1/healthz 200 get_endpoint
grep -q '"leader":true' "$work/body" || fail "the endpoint's /v1/healthz does not say it leads"
user=$(docker top "$container" -eo pid,uid | awk 'NR==2 {print $2}')
[[ "$user" == "65532" ]] || fail "the operator runs as uid $user, not 65532"
# docker copies the container's output asynchronously: wait for the line.
synced_logged() {
  for _ in $(seq 1 50); do
    docker logs "$container" 2>&1 | grep -q '"caches synced"' && return 0
    sleep 0.2
  done
  return 1
}
synced_logged || { docker logs "$container" >&2 || true; fail "the log does not say the caches synced"; }

printf 'image-check: ok: binary %s bytes; image %s bytes (%s bytes gzip-compressed); %s\n' \
  "$binary_size" "$size" "$compressed" "healthz, readyz, metrics and the endpoint (HTTPS) answered as uid 65532 on a read-only root"
