#!/usr/bin/env python3
"""Stable identity on a real node (scripts/node-check.sh, step 6):

    identity_check.py NAMESPACE IMAGE SERVICE_IP SYSTEM

In NAMESPACE: ConsumerPool `stateful` (app=stateful-consumer), ShardGroup
`events` of 12 static partitions, and a StatefulSet `web` of 4 pods running
IMAGE (docs/examples/consumer.py's endpoint loop, as step 4's pods). Watches
the published document and the pods (kubectl, every 0.1 s) and measures:

  1. `kubectl rollout restart statefulset web` without the pool's identity
     (the baseline) and with `identity: {stable: true, returnWithin: 2m}`:
     moves (a partition active on another pod than before), and the
     longest a partition was active nowhere against its pod's restart (from
     the pod seen terminating or not Ready to its name Ready again);
  2. the consumer process killed with SIGKILL inside web-1 (the kubelet
     restarts the container in the same pod): moves;
  3. web-2 deleted (the StatefulSet recreates it): moves;
  4. scale 4 -> 3: web-3's partitions move at once (within the drain
     timeout, long before the 2 m window);
  5. web-0 deleted with the node cordoned (its successor stays Pending) and
     the window shortened to 20 s: its partitions move when the window
     ends, with an Event HoldExpired naming it.

Prints one line per figure; exit 1 when a target is missed (0.00 moves per
partition for the restarts with identity, unread no longer than the
restart plus 1 s, 0 moves for the kill and the deletion, exactly web-3's
partitions moving at once on the scale-down, a pod that does not return
losing its partitions 20 to 40 s after it went).
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

SHARDS = 12
GROUP = "events"


def kubectl(*args, stdin=None):
    return subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True, input=stdin).stdout


class Watch(threading.Thread):
    """Polls the document and the pods; keeps owners, moves, unread
    intervals and pod restarts."""

    def __init__(self, namespace):
        super().__init__(daemon=True)
        self.namespace = namespace
        self.lock = threading.Lock()
        self.owner = {}          # shard -> last active owner
        self.moves = 0
        self.unread_since = {}   # shard -> when first seen active nowhere
        self.unread = []         # (shard, owner after, seconds)
        self.away_since = {}     # pod name -> when first seen not eligible
        self.restarts = {}       # pod name -> [seconds]
        self.doc = None
        self.stop = False

    def poll(self):
        out = json.loads(kubectl("-n", self.namespace, "get", "pods,configmaps", "-o", "json"))
        now = time.monotonic()
        doc = None
        pods = {}
        for item in out["items"]:
            if item["kind"] == "ConfigMap" and item["metadata"]["name"] == f"{GROUP}-assignment":
                doc = json.loads(item["data"]["assignment.json"])
            elif item["kind"] == "Pod" and item["metadata"].get("labels", {}).get("app") == "stateful-consumer":
                ready = any(c["type"] == "Ready" and c["status"] == "True"
                            for c in item.get("status", {}).get("conditions", []))
                pods[item["metadata"]["name"]] = ready and "deletionTimestamp" not in item["metadata"]
        with self.lock:
            for name, eligible in pods.items():
                if not eligible:
                    self.away_since.setdefault(name, now)
                elif name in self.away_since:
                    self.restarts.setdefault(name, []).append(now - self.away_since.pop(name))
            if doc is None:
                return
            self.doc = doc
            for shard, record in doc["shards"].items():
                if record.get("state", "Active") == "Active" and record.get("owner"):
                    owner = record["owner"]
                    before = self.owner.get(shard)
                    if before is not None and before != owner:
                        self.moves += 1
                    self.owner[shard] = owner
                    if shard in self.unread_since:
                        self.unread.append((shard, owner, now - self.unread_since.pop(shard)))
                else:
                    self.unread_since.setdefault(shard, now)

    def run(self):
        while not self.stop:
            try:
                self.poll()
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.1)

    def mark(self):
        """Starts a new measurement: returns the moves so far, clears the
        intervals."""
        with self.lock:
            self.unread.clear()
            self.restarts.clear()
            return self.moves


def settled(watch, pods):
    with watch.lock:
        doc = watch.doc
    if doc is None:
        return False
    per = SHARDS // len(pods)
    entries = doc.get("pods", {})
    return all(len(entries.get(p, {}).get("active", [])) == per for p in pods) and all(
        not e.get("revoking") and not e.get("held") for e in entries.values())


def returned(watch, pods):
    """Every pod of `pods` was seen away and back since the last mark."""
    with watch.lock:
        return not watch.away_since and all(p in watch.restarts for p in pods)


def wait(what, cond, timeout=240):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    raise SystemExit(f"identity check: FAILED: {what} not within {timeout}s")


def manifests(namespace, image, service_ip, system):
    return f"""
apiVersion: shardring.io/v1alpha1
kind: ConsumerPool
metadata: {{name: stateful}}
spec:
  selector: {{matchLabels: {{app: stateful-consumer}}}}
---
apiVersion: shardring.io/v1alpha1
kind: ShardGroup
metadata: {{name: {GROUP}}}
spec:
  poolRef: {{name: stateful}}
  source: {{static: {{count: {SHARDS}, nameTemplate: "events-{{index}}"}}}}
  handoff: {{drainTimeout: 30s}}
  rebalance: {{delay: 0s, initialDelay: 0s}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web}}
spec:
  replicas: 4
  serviceName: web
  selector: {{matchLabels: {{app: stateful-consumer}}}}
  template:
    metadata: {{labels: {{app: stateful-consumer}}}}
    spec:
      serviceAccountName: orders-consumer
      terminationGracePeriodSeconds: 30
      hostAliases:
        - ip: "{service_ip}"
          hostnames: [shardring-endpoint.{system}.svc]
      securityContext: {{runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532}}
      containers:
        - name: consumer
          image: {image}
          imagePullPolicy: Never
          args: [--shard-group, {namespace}/{GROUP}, --endpoint-url, "https://shardring-endpoint.{system}.svc",
                 --endpoint-wait, "30"]
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {{drop: [ALL]}}
          volumeMounts:
            - {{name: shardring-endpoint, mountPath: /var/run/secrets/shardring.io, readOnly: true}}
      volumes:
        - name: shardring-endpoint
          projected:
            sources:
              - serviceAccountToken: {{audience: shardring.io, expirationSeconds: 3600, path: token}}
              - configMap: {{name: shardring-endpoint-ca, items: [{{key: ca.crt, path: ca.crt}}]}}
"""


def consumer_pid(pod):
    """The host pid of the consumer process of `pod` (this machine is the
    node): its environment names the pod (HOSTNAME)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--shard-group" in cmdline and f"HOSTNAME={pod}".encode() in environ:
            return int(pid)
    return None


def restart_count(namespace, pod):
    out = json.loads(kubectl("-n", namespace, "get", "pod", pod, "-o", "json"))
    return sum(c.get("restartCount", 0) for c in out["status"].get("containerStatuses", []))


def rollout(namespace, watch, pods, label):
    before = watch.mark()
    started = time.monotonic()
    kubectl("-n", namespace, "rollout", "restart", "statefulset/web")
    kubectl("-n", namespace, "rollout", "status", "statefulset/web", "--timeout=300s")
    # Settled, and every pod's return seen: `kubectl get pods,configmaps`
    # lists the pods before the ConfigMap, so one poll can show a pod's
    # partitions active again while listing that pod as not yet Ready; its
    # restart is recorded by the next poll.
    wait("the rolling restart settled", lambda: settled(watch, pods) and returned(watch, pods))
    with watch.lock:
        moves = watch.moves - before
        unread = list(watch.unread)
        restarts = {p: max(r) for p, r in watch.restarts.items()}
    longest = max((s for _, _, s in unread), default=0.0)
    over = [(shard, owner, s, restarts.get(owner, 0.0)) for shard, owner, s in unread
            if s > restarts.get(owner, 0.0) + 1.0]
    print(f"identity check: rolling restart {label}: {moves} moves of {SHARDS} "
          f"({moves / SHARDS:.2f} per partition) in {time.monotonic() - started:.1f} s; "
          f"longest unread {longest:.1f} s; pod restarts {', '.join(f'{p} {s:.1f} s' for p, s in sorted(restarts.items()))}")
    return moves, over


def main():
    namespace, image, service_ip, system = sys.argv[1:5]
    kubectl("-n", namespace, "apply", "-f", "-", stdin=manifests(namespace, image, service_ip, system))
    pods4 = [f"web-{i}" for i in range(4)]
    kubectl("-n", namespace, "rollout", "status", "statefulset/web", "--timeout=300s")
    watch = Watch(namespace)
    watch.start()
    wait("12 partitions 3 each on web-0..3", lambda: settled(watch, pods4))

    baseline, _ = rollout(namespace, watch, pods4, "without identity")
    kubectl("-n", namespace, "patch", "consumerpool", "stateful", "--type", "merge",
            "-p", '{"spec":{"identity":{"stable":true,"returnWithin":"2m"}}}')
    moves, over = rollout(namespace, watch, pods4, "with identity")
    failures = []
    if moves != 0:
        failures.append(f"{moves} moves over the rolling restart with identity")
    if over:
        failures.append(f"partitions unread longer than their pod's restart + 1 s: {over}")

    # The consumer process killed in its pod: the kubelet restarts it.
    before = watch.mark()
    count = restart_count(namespace, "web-1")
    pid = consumer_pid("web-1")
    if pid is None:
        failures.append("web-1's consumer process not found on this node")
    else:
        os.kill(pid, signal.SIGKILL)
        wait("web-1's container restarted", lambda: restart_count(namespace, "web-1") > count)
        wait("settled after the kill", lambda: settled(watch, pods4) and not watch.away_since)
        killed = watch.moves - before
        print(f"identity check: consumer process of web-1 killed (container restarted in the pod): {killed} moves")
        if killed:
            failures.append(f"{killed} moves after a container restart")

    # A deleted pod, recreated by the StatefulSet under its name.
    before = watch.mark()
    kubectl("-n", namespace, "delete", "pod", "web-2", "--wait=false")
    wait("web-2 away", lambda: "web-2" in watch.away_since or watch.restarts.get("web-2"))
    wait("web-2 back and settled", lambda: settled(watch, pods4) and "web-2" not in watch.away_since)
    deleted = watch.moves - before
    print(f"identity check: web-2 deleted and recreated: {deleted} moves; restart {max(watch.restarts.get('web-2', [0])):.1f} s")
    if deleted:
        failures.append(f"{deleted} moves after a recreated pod")

    # Scaled down: web-3 will not return.
    before = watch.mark()
    started = time.monotonic()
    kubectl("-n", namespace, "scale", "statefulset/web", "--replicas", "3")
    pods3 = pods4[:3]
    wait("settled on 3 pods", lambda: settled(watch, pods3), timeout=110)
    took = time.monotonic() - started
    scaled = watch.moves - before
    print(f"identity check: scale 4 -> 3: {scaled} moves in {took:.1f} s (window 120 s)")
    if scaled != 3 or took >= 60:
        failures.append(f"scale-down: {scaled} moves in {took:.1f} s; web-3's 3 partitions must move at once")
    # A pod that does not come back: the node is cordoned, so the pod the
    # StatefulSet creates again stays Pending; its partitions move when the
    # window (shortened to 20 s) ends.
    kubectl("-n", namespace, "patch", "consumerpool", "stateful", "--type", "merge",
            "-p", '{"spec":{"identity":{"returnWithin":"20s"}}}')
    node = kubectl("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").strip()
    before = watch.mark()
    kubectl("cordon", node)
    try:
        started = time.monotonic()
        kubectl("-n", namespace, "delete", "pod", "web-0", "--wait=false")
        wait("web-0's partitions on web-1 and web-2", lambda: settled(watch, pods3[1:]), timeout=90)
        took = time.monotonic() - started
    finally:
        kubectl("uncordon", node)
    expired = watch.moves - before
    listed = json.loads(kubectl("-n", namespace, "get", "events.events.k8s.io", "-o", "json"))["items"]
    events = " | ".join(e.get("note", "") for e in listed if e.get("reason") == "HoldExpired")
    print(f"identity check: web-0 not back (node cordoned): {expired} moves after {took:.1f} s (window 20 s); Event: {events.strip()[:160]}")
    # The window counts from the deletion timestamp, kept to the second.
    if expired != 4 or not 19 <= took < 40:
        failures.append(f"a pod that did not return: {expired} moves after {took:.1f} s; expected 4 after the 20 s window")
    if "web-0" not in events:
        failures.append("no HoldExpired Event names web-0")

    watch.stop = True
    print(f"identity check: baseline {baseline / SHARDS:.2f} -> {moves / SHARDS:.2f} moves per partition per rolling restart")
    if failures:
        print("identity check: FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
