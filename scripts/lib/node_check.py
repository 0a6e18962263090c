#!/usr/bin/env python3
"""What scripts/node-check.sh reads back from the cluster, through kubectl:

    node_check.py views NAMESPACE GROUP
        every Running pod of the group's pool logged (docs/examples/consumer.py's
        "view epoch E: active [...]") the view its annotation holds now, and
        the annotation agrees with the published document; exit 1 otherwise.
    node_check.py handoff NAMESPACE GROUP PODS TIMEOUT WITHIN
        watches the document until PODS pods hold every shard, balanced, nothing
        revoking or pending; prints when a revoke was first and last seen and
        when the group settled; exit 1 after TIMEOUT seconds, or when it
        settled WITHIN seconds or more after the first revoke was seen.
    node_check.py first NAMESPACE GROUP PODS TIMEOUT MANIFEST
        watches for the group's document, then applies MANIFEST (a pool, the
        group and its consumer Deployment together, as a GitOps sync does);
        the first document published must already hold every shard on PODS
        pods, balanced (a fresh deploy lands in one balanced document, not
        on the first pod to turn Ready); prints when it arrived after the
        apply and its shards per pod; exit 1 otherwise or after TIMEOUT.

Exit 1 prints what was last seen, so a failure says what to look at.
"""

import ast
import json
import queue
import re
import subprocess
import sys
import threading
import time

VIEW_LINE = re.compile(r"^view epoch (\d+): active (\[.*?\]) revoking (\[.*?\])")


def kubectl(*args: str) -> str:
    return subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True).stdout


def document(namespace: str, group: str) -> dict:
    cm = json.loads(kubectl("-n", namespace, "get", "configmap", f"{group}-assignment", "-o", "json"))
    return json.loads(cm["data"]["assignment.json"])


def pool_pods(namespace: str, group: str) -> list:
    sg = json.loads(kubectl("-n", namespace, "get", "shardgroup", group, "-o", "json"))
    pool = json.loads(kubectl("-n", namespace, "get", "consumerpool", sg["spec"]["poolRef"]["name"], "-o", "json"))
    selector = ",".join(f"{k}={v}" for k, v in pool["spec"]["selector"]["matchLabels"].items())
    pods = json.loads(kubectl("-n", namespace, "get", "pods", "-l", selector, "-o", "json"))["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]]


def last_logged_view(namespace: str, pod: str):
    """The last view the pod's consumer printed, or None."""
    last = None
    for line in kubectl("-n", namespace, "logs", pod).splitlines():
        match = VIEW_LINE.match(line)
        if match:
            last = (int(match[1]), sorted(ast.literal_eval(match[2])), sorted(ast.literal_eval(match[3])))
    return last


def views(namespace: str, group: str) -> int:
    doc = document(namespace, group)
    pods = pool_pods(namespace, group)
    problems = []
    for pod in pods:
        name = pod["metadata"]["name"]
        raw = pod["metadata"].get("annotations", {}).get(f"assignment.shardring.io/{group}")
        if raw is None:
            problems.append(f"{name}: no annotation yet")
            continue
        annotation = json.loads(raw)
        want = (annotation["epoch"], sorted(annotation.get("active", [])), sorted(annotation.get("revoking", [])))
        entry = doc["pods"].get(name, {})
        if sorted(entry.get("active", [])) != want[1]:
            problems.append(f"{name}: annotation active {want[1]} but document epoch {doc['epoch']} has {entry.get('active', [])}")
        logged = last_logged_view(namespace, name)
        if logged != want:
            problems.append(f"{name}: logged view {logged}, annotation {want}")
    if not pods:
        problems.append("no Running pod in the pool")
    if problems:
        print("; ".join(problems))
        return 1
    print(f"{len(pods)} pods: each one's view from the endpoint equals its annotation at epoch {doc['epoch']}")
    return 0


def settled(doc: dict, pods: int) -> bool:
    if len(doc["pods"]) != pods:
        return False
    if any(entry.get("revoking") for entry in doc["pods"].values()):
        return False
    shards = doc["shards"]
    if any(s.get("state") not in ("Active", None) or not s.get("owner") for s in shards.values()):
        return False
    loads = [len(entry.get("active", [])) for entry in doc["pods"].values()]
    return sum(loads) == len(shards) and max(loads) - min(loads) <= 1


def document_watch(namespace: str, group: str) -> subprocess.Popen:
    """`kubectl --watch` of the group's document. A list watch selected by
    name: it also waits for a document that does not exist yet (a watch of
    the named object fails on NotFound)."""
    return subprocess.Popen(
        ["kubectl", "-n", namespace, "get", "configmaps", "--field-selector",
         f"metadata.name={group}-assignment", "--watch", "-o", "json"],
        stdout=subprocess.PIPE, text=True)


def watched_documents(namespace: str, group: str, deadline: float, watch=None):
    """Every version of the published document from now on (from `watch`'s
    start when given), with the time it arrived (a watch, so no version
    between two polls is missed), until `deadline` (time.monotonic())."""
    watch = watch or document_watch(namespace, group)
    arrived = queue.Queue()

    def read():
        decoder, buffer = json.JSONDecoder(), ""
        for line in watch.stdout:
            buffer += line
            while True:
                stripped = buffer.lstrip()
                try:
                    cm, end = decoder.raw_decode(stripped)
                except json.JSONDecodeError:
                    break
                buffer = stripped[end:]
                arrived.put((time.monotonic(), json.loads(cm["data"]["assignment.json"])))
        arrived.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            try:
                item = arrived.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if item is None:
                return
            yield item
    finally:
        watch.kill()


def handoff(namespace: str, group: str, pods: int, timeout: float, within: float) -> int:
    started = time.monotonic()
    first_revoke = last_revoke = None
    doc = None
    for arrived, doc in watched_documents(namespace, group, started + timeout):
        at = arrived - started
        if any(entry.get("revoking") for entry in doc["pods"].values()):
            first_revoke = at if first_revoke is None else first_revoke
            last_revoke = at
        elif first_revoke is not None and settled(doc, pods):
            print(f"revokes first published at {first_revoke:.2f} s, last at {last_revoke:.2f} s; "
                  f"settled on {pods} pods at epoch {doc['epoch']} {at:.2f} s after the scale-up "
                  f"({at - first_revoke:.2f} s after the first revoke)")
            return 0 if at - first_revoke < within else 1
    summary = {pod: entry for pod, entry in (doc or {}).get("pods", {}).items()}
    print(f"not settled on {pods} pods within {timeout} s (first revoke seen: {first_revoke}); "
          f"last document epoch {(doc or {}).get('epoch')}: {json.dumps(summary)}")
    return 1


def first(namespace: str, group: str, pods: int, timeout: float, manifest: str) -> int:
    # The watch runs before the apply: the first version is the one judged.
    watch = document_watch(namespace, group)
    started = time.monotonic()
    try:
        kubectl("-n", namespace, "apply", "-f", manifest)
    except subprocess.CalledProcessError as error:
        watch.kill()
        print(f"kubectl apply -f {manifest}: {error.stderr.strip()}")
        return 1
    for arrived, doc in watched_documents(namespace, group, started + timeout, watch):
        counts = {pod: len(entry.get("active", [])) for pod, entry in sorted(doc["pods"].items())}
        shape = ", ".join(str(n) for n in sorted(counts.values()))
        at = arrived - started
        if doc["epoch"] != 1:
            # The watch connected after a version or more had been written.
            print(f"the watch first saw epoch {doc['epoch']}, not the first document")
            return 1
        if settled(doc, pods):
            print(f"first document (epoch {doc['epoch']}) {at:.2f} s after the apply: "
                  f"{len(doc['shards'])} shards on {len(counts)} pods as {shape}, nothing to move")
            return 0
        print(f"first document (epoch {doc['epoch']}) {at:.2f} s after the apply is not balanced "
              f"over {pods} pods: {json.dumps(counts)} ({shape})")
        return 1
    print(f"no document within {timeout} s of the apply")
    return 1


def main() -> int:
    command, namespace, group, *rest = sys.argv[1:]
    if command == "views":
        return views(namespace, group)
    if command == "handoff":
        return handoff(namespace, group, int(rest[0]), float(rest[1]), float(rest[2]))
    if command == "first":
        return first(namespace, group, int(rest[0]), float(rest[1]), rest[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
