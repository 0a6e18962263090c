#!/usr/bin/env bash
# The operator as a user installs it, on a real node: the kit's control plane
# with its node stage (../shared/k8s: `up`, then `node-up` as root), or any
# cluster with one node whose containerd the kit's `image-import` can load.
#   1. images, with no base image and no container engine
#      (scripts/lib/image.sh): the operator's, from what its binary links,
#      tagged as deploy/install.yaml names it; and the example Python
#      consumer's (docs/examples/consumer.py on this machine's CPython);
#      both loaded into the node's containerd with `image-import`;
#   2. `kubectl apply --server-side -f deploy/install.yaml`, unchanged:
#      `rollout status` returns and both replicas are Ready;
#   3. leader election: the Lease holder's pod is deleted; another replica
#      holds the Lease and carries the endpoint-leader label (the time is
#      printed), and the Deployment is back at two Ready replicas;
#   4. the consumer endpoint from real pods, through its Service, with the
#      peer-IP check on (install.yaml's default): in a fresh namespace the
#      samples (ConsumerPool `consumers`, ShardGroup `orders` of 16 static
#      partitions) and a Deployment of 2 pods running consumer.py's
#      endpoint-only loop (projected token for audience shardring.io, the CA
#      ConfigMap the operator publishes, the Service's name mapped to its
#      ClusterIP with hostAliases: the kit has no DNS). Each pod's view from
#      the endpoint equals its annotation; after a scale-up to 3 (the group's
#      rebalance delay set to 0 so the moves start at once), the moves
#      complete on the old owners' release acknowledgements, well inside the
#      30 s drain timeout, and the three views equal their annotations;
#   5. a fresh deploy: a ConsumerPool, a ShardGroup of 24 partitions
#      (drainTimeout 60s) and a Deployment of 6 consumer pods in one apply:
#      the first document holds 4 partitions on each pod, nothing to move;
#   6. stable identity (scripts/lib/identity_check.py): a StatefulSet of 4
#      of those consumer pods and a ShardGroup of 12 partitions on a pool
#      with identity.stable: `kubectl rollout restart` moves no partition
#      (before, without the setting: the baseline), each partition unread no
#      longer than its pod's restart plus 1 s; a consumer process killed in
#      its pod and a deleted pod recreated move nothing; a scale 4 -> 3
#      moves the removed pod's partitions at once; a pod that cannot come
#      back (node cordoned) loses its partitions when the window ends.
# Everything it created is deleted at the end (the CRDs stay: deleting them
# would delete every ShardGroup in the cluster).
#
#   SHARDRING_IMAGE_BINARY=target/debug/shardring ./scripts/node-check.sh
#
# Needs: KUBECONFIG at the cluster, root (image-import), kubectl, python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib/image.sh

kit=${SHARDRING_K8S:-../shared/k8s}
binary=${SHARDRING_IMAGE_BINARY:-target/debug/shardring}
system=shardring-system
ns=node-check-$RANDOM
work=$(mktemp -d)
say() { printf '== %s\n' "$*"; }
fail() {
  printf 'node-check: FAILED: %s\n' "$*" >&2
  kubectl -n "$system" get pods -o wide >&2 || true
  for pod in $(kubectl -n "$system" get pods -o name 2>/dev/null); do
    echo "--- $pod (last 20 lines)" >&2
    kubectl -n "$system" logs "$pod" --tail 20 >&2 || true
  done
  exit 1
}
cleanup() {
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  # The install without its CRDs: they would take every ShardGroup with them.
  python3 - deploy/install.yaml > "$work/install-no-crds.yaml" <<'EOF' || true
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
print("\n---\n".join(d for d in docs if "kind: CustomResourceDefinition" not in d))
EOF
  kubectl delete -f "$work/install-no-crds.yaml" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
# until DEADLINE_S DESCRIPTION COMMAND...: runs COMMAND every 0.2 s until it
# succeeds, or fails the check after DEADLINE_S seconds.
until_ok() {
  local deadline=$1 what=$2; shift 2
  local end=$((SECONDS + deadline))
  while ! "$@" >"$work/last" 2>&1; do
    ((SECONDS < end)) || fail "$what: not within ${deadline}s; last: $(tail -c 600 "$work/last")"
    sleep 0.2
  done
}

[[ -x "$binary" ]] || fail "$binary is not an executable (build it, or set SHARDRING_IMAGE_BINARY)"
kubectl get nodes -o name | grep -q . || fail "the cluster has no node (the kit's node stage: $kit/node-up)"
until_ok 120 "a Ready node" sh -c "kubectl get nodes -o jsonpath='{.items[*].status.conditions[?(@.type==\"Ready\")].status}' | grep -q True"

# --- 1. images -----------------------------------------------------------
image=$(grep -m1 -oE 'image: [^ ]+' deploy/install.yaml | cut -d' ' -f2)
consumer_image=localhost/shardring-example-consumer:check
say "images: $image from $binary, $consumer_image from docs/examples/consumer.py"
operator_image "$binary" "$image" "$work/operator.tar"
python_image docs/examples/consumer.py "$consumer_image" "$work/consumer.tar"
"$kit/image-import" "$work/operator.tar" "$work/consumer.tar" >/dev/null

# --- 2. the install --------------------------------------------------------
say "kubectl apply --server-side --force-conflicts -f deploy/install.yaml"
# --force-conflicts: the e2e suite (least_privilege) or a bench may have
# applied the install's RBAC and admission policy under another field
# manager first; the server defaults fields inside the policy's atomic
# matchConstraints, so a second manager's identical apply conflicts there.
kubectl apply --server-side --force-conflicts -f deploy/install.yaml >/dev/null
started=$(now)
kubectl -n "$system" rollout status deployment/shardring --timeout=180s >/dev/null \
  || fail "rollout status did not return within 180 s"
ready=$(kubectl -n "$system" get deployment shardring -o jsonpath='{.status.readyReplicas}')
[[ "$ready" == 2 ]] || fail "$ready replicas Ready, want 2"
say "rollout status returned after $(elapsed "$started") s: 2 replicas Ready"

# --- 3. leader election ----------------------------------------------------
holder() { kubectl -n "$system" get lease shardring-leader -o jsonpath='{.spec.holderIdentity}'; }
until_ok 60 "a Lease holder" sh -c "kubectl -n $system get lease shardring-leader -o jsonpath='{.spec.holderIdentity}' | grep -q ."
leader=$(holder)
say "deleting the leader $leader"
started=$(now)
kubectl -n "$system" delete pod "$leader" --wait=false >/dev/null
new_leader_labelled() {
  local now_holder
  now_holder=$(holder)
  [[ -n "$now_holder" && "$now_holder" != "$leader" ]] || return 1
  [[ "$(kubectl -n "$system" get pod "$now_holder" -o jsonpath='{.metadata.labels.shardring\.io/endpoint-leader}')" == true ]]
}
until_ok 60 "another replica holds the Lease and the endpoint label" new_leader_labelled
say "the Lease moved to $(holder) $(elapsed "$started") s after the deletion, with the endpoint label"
kubectl -n "$system" rollout status deployment/shardring --timeout=180s >/dev/null \
  || fail "the Deployment did not return to 2 Ready replicas"

# --- 4. the consumer endpoint from real pods -----------------------------------
say "namespace $ns: the samples and 2 consumer pods on the endpoint"
kubectl create namespace "$ns" >/dev/null
kubectl -n "$ns" apply -k config/samples/ >/dev/null
kubectl -n "$ns" patch shardgroup orders --type merge \
  -p '{"spec":{"rebalance":{"delay":"0s","maxMovesPerWindow":16}}}' >/dev/null
service_ip=$(kubectl -n "$system" get service shardring-endpoint -o jsonpath='{.spec.clusterIP}')
cat > "$work/consumer.yaml" <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: orders-consumer}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: orders-consumer}
spec:
  replicas: 2
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  selector: {matchLabels: {app: consumer}}
  template:
    metadata: {labels: {app: consumer}}
    spec:
      serviceAccountName: orders-consumer
      hostAliases:
        - ip: "$service_ip"
          hostnames: [shardring-endpoint.$system.svc]
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532}
      containers:
        - name: consumer
          image: $consumer_image
          imagePullPolicy: Never
          args: [--shard-group, $ns/orders, --endpoint-url, "https://shardring-endpoint.$system.svc",
                 --endpoint-wait, "30"]
          env:
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
          volumeMounts:
            - {name: shardring-endpoint, mountPath: /var/run/secrets/shardring.io, readOnly: true}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
      volumes:
        - name: shardring-endpoint
          projected:
            sources:
              - serviceAccountToken: {audience: shardring.io, expirationSeconds: 3600, path: token}
              - configMap: {name: shardring-endpoint-ca, items: [{key: ca.crt, path: ca.crt}]}
EOF
kubectl -n "$ns" apply -f "$work/consumer.yaml" >/dev/null
kubectl -n "$ns" rollout status deployment/orders-consumer --timeout=180s >/dev/null \
  || fail "the consumer pods did not become Ready"
# The pool's minReadySeconds (10 s) passes before the pods hold partitions.
until_ok 90 "2 pods' views from the endpoint equal their annotations" \
  python3 scripts/lib/node_check.py views "$ns" orders
say "$(cat "$work/last")"

say "scale-up to 3 consumer pods"
kubectl -n "$ns" scale deployment/orders-consumer --replicas 3 >/dev/null
python3 scripts/lib/node_check.py handoff "$ns" orders 3 120 10 >"$work/handoff" \
  || fail "the moves onto the third pod: $(cat "$work/handoff")"
say "$(cat "$work/handoff")"
acks=0
for pod in $(kubectl -n "$ns" get pods -l app=consumer -o name); do
  acks=$((acks + $(kubectl -n "$ns" logs "$pod" | grep -c '^released ' || true)))
done
[[ "$acks" -ge 1 ]] || fail "no consumer logged an acknowledged release"
until_ok 30 "3 pods' views from the endpoint equal their annotations" \
  python3 scripts/lib/node_check.py views "$ns" orders
say "$(cat "$work/last"); $acks releases acknowledged"

# --- 5. a fresh deploy lands in one balanced document ------------------------
# A ConsumerPool, a ShardGroup of 24 partitions (drainTimeout 60s) and a
# 6-replica consumer Deployment in one apply, as a GitOps sync applies them:
# the first document already spreads the partitions over the six pods
# (without the first publish's hold, the first pod to turn Ready got all 24
# and the other five waited for the drain timeout of 20 revokes). The
# Deployment is step 4's (its ServiceAccount is reused), renamed and
# relabelled.
say "a fresh deploy: pool, 24-partition group and 6 consumer pods in one apply"
{
  cat <<EOF
apiVersion: shardring.io/v1alpha1
kind: ConsumerPool
metadata: {name: fresh}
spec:
  selector: {matchLabels: {app: fresh}}
---
apiVersion: shardring.io/v1alpha1
kind: ShardGroup
metadata: {name: fresh}
spec:
  poolRef: {name: fresh}
  source: {static: {count: 24}}
  handoff: {drainTimeout: 60s}
EOF
  sed -n '/^kind: Deployment$/,$p' "$work/consumer.yaml" | sed \
    -e '1i ---\napiVersion: apps/v1' \
    -e 's/^metadata: {name: orders-consumer}$/metadata: {name: fresh-consumer}/' \
    -e 's/replicas: 2/replicas: 6/' -e 's/app: consumer/app: fresh/g' \
    -e "s|$ns/orders|$ns/fresh|"
} > "$work/fresh.yaml"
python3 scripts/lib/node_check.py first "$ns" fresh 6 120 "$work/fresh.yaml" >"$work/fresh" \
  || fail "a fresh deploy: $(cat "$work/fresh")"
say "$(cat "$work/fresh")"
kubectl -n "$ns" delete -f "$work/fresh.yaml" --wait=false >/dev/null

# --- 6. stable identity: a StatefulSet's restarts ---------------------------
say "stable identity: StatefulSet web of 4 consumer pods, ShardGroup events of 12 partitions"
python3 scripts/lib/identity_check.py "$ns" "$consumer_image" "$service_ip" "$system" \
  || fail "stable identity (see the figures above)"

printf 'node-check: ok: %s on node %s: install, rollout, leader failover, the endpoint from real pods with the peer-IP check on, a fresh deploy balanced in its first document, and stable identity\n' \
  "$image" "$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')"
