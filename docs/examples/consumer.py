#!/usr/bin/env python3
"""A shardring consumer in plain Python: reads the published JSON contract
(mounted ConfigMap file or downward-API annotation), takes KCL-format leases
in DynamoDB with conditional writes only for shards that are `active` at the
newest epoch, reads them from Kinesis from the checkpoint, and hands them
back at once when they appear in `revoking`. On SIGTERM it reads on until its
shards are revoked (or a deadline passes), then checkpoints, releases, exits.

With --endpoint-url it also long-polls its view from the operator's consumer
endpoint (HTTPS, the projected token and the endpoint's CA; the standard
library only) beside the file, and acknowledges there every shard it releases.
Without --stream it runs the endpoint alone as a small loop with no AWS at
all: it prints its active shards and acknowledges every revoke at once.

Walkthrough: docs/consumer.md. Needs boto3 for AWS; `--self-test` checks the
contract logic (parsing, epoch fencing, can_acquire) with the standard library
only.

    python3 consumer.py --pod "$POD_NAME" --stream orders --lease-table orders-leases \
        --view-file /etc/shardring/assignment.json
    python3 consumer.py --shard-group prod/orders \
        --endpoint-url https://shardring-endpoint.shardring-system.svc
"""

import argparse
import gzip
import http.client
import json
import os
import random
import signal
import ssl
import sys
import threading
import time
import urllib.parse

# ---------------------------------------------------------------- the contract


def parse_view(raw: bytes, pod: str, shard_group: str):
    """This pod's view {epoch, active, standby, revoking} from any of the
    published shapes, or None when the pod has no view yet."""
    if raw[:2] == b"\x1f\x8b":  # binaryData assignment.json.gz
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8").strip()
    if not text:
        return None  # a single-annotation projection before it is written
    if text.startswith("{"):
        doc = json.loads(text)
        if "pods" in doc or doc.get("kind") == "Assignment":  # the whole document
            if doc.get("apiVersion") != "shardring.io/v1alpha1":
                raise ValueError(f"unsupported apiVersion {doc.get('apiVersion')}")
            entry = doc.get("pods", {}).get(pod, {})
            return normalise({"epoch": doc["epoch"], **entry})
        return normalise(doc)  # the pod annotation's value
    # metadata.annotations projected as key="value" lines (Go %q quoting,
    # which for JSON text is a valid JSON string literal).
    key = "assignment.shardring.io/" + shard_group.split("/")[-1]
    for line in text.splitlines():
        name, _, quoted = line.partition("=")
        if name == key:
            return normalise(json.loads(json.loads(quoted)))
    return None


def normalise(view):
    return {
        "epoch": int(view["epoch"]),
        "active": list(view.get("active", [])),
        "standby": list(view.get("standby", [])),
        "revoking": list(view.get("revoking", [])),
    }


class View:
    """The newest view seen. Never goes back to an older epoch."""

    def __init__(self):
        self.current = None

    def offer(self, view) -> bool:
        if view is None:
            return False
        if self.current is not None and view["epoch"] < self.current["epoch"]:
            return False  # stale: ignore
        changed = view != self.current
        self.current = view
        return changed

    def can_acquire(self, shard: str) -> bool:
        return self.current is not None and shard in self.current["active"]


# ---------------------------------------------------------- the endpoint


class EndpointError(Exception):
    def __init__(self, status, body):
        self.status, self.reason = status, body.get("reason", "")
        super().__init__(f"{status} {self.reason}: {body.get('message', '')}")


class Endpoint:
    """The operator's consumer endpoint: GET the view (long-poll), POST release
    acknowledgements. Trusts only the CA file; re-reads the token file before
    every request (the kubelet rotates it) and the CA when it changes; obeys
    429 Retry-After and X-RateLimit-Remaining/Reset; retries NotLeader at once
    on a new connection (a few times, then with a small backoff)."""

    def __init__(self, url, token_file, ca_file, shard_group):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"--endpoint-url must be https://host[:port], not {url}")
        self.host, self.port = parts.hostname, parts.port or 443
        self.token_file, self.ca_file = token_file, ca_file
        namespace, _, name = shard_group.rpartition("/")
        namespace = namespace or os.environ.get("POD_NAMESPACE", "default")
        base = f"/v1/namespaces/{namespace}/shardgroups/{name}"
        self.view_path, self.releases_path = base + "/view", base + "/releases"
        self.ca_pem, self.context, self.conn, self.not_before = None, None, None, 0.0

    def _connection(self, timeout):
        with open(self.ca_file) as f:
            pem = f.read()
        if pem != self.ca_pem:  # a new CA: new context, new connection
            self.ca_pem, self.context = pem, ssl.create_default_context(cadata=pem)
            self.close()
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.context)
        self.conn.timeout = timeout
        if self.conn.sock is not None:
            self.conn.sock.settimeout(timeout)
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, timeout=15.0):
        not_leader = 0
        while True:
            time.sleep(max(0.0, self.not_before - time.monotonic()))  # rate-limit window
            with open(self.token_file) as f:
                token = f.read().strip()  # re-read every time: the kubelet rotates it
            headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            conn = self._connection(timeout)
            try:
                conn.request(method, path, body=None if body is None else json.dumps(body),
                             headers=headers)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                self.close()  # the next attempt connects afresh
                raise
            if response.getheader("X-RateLimit-Remaining") == "0":
                reset = float(response.getheader("X-RateLimit-Reset") or 1)
                self.not_before = time.monotonic() + reset
            if (response.getheader("Connection") or "").lower() == "close" or response.status == 503:
                self.close()
            payload = json.loads(data) if data else {}
            if response.status == 429:
                wait = float(response.getheader("Retry-After") or 1)
                print(f"endpoint: rate limited, retrying in {wait}s", file=sys.stderr, flush=True)
                self.not_before = max(self.not_before, time.monotonic() + wait)
                continue
            if response.status == 503 and payload.get("reason") == "NotLeader":
                not_leader += 1
                if not_leader > 3:
                    time.sleep(min(2.0, 0.1 * 2 ** (not_leader - 3)) * random.uniform(0.5, 1))
                continue  # on a new connection: the Service routes it to the leader
            if response.status >= 400:
                if response.status == 401:
                    print(f"endpoint refused the token in {self.token_file}: "
                          f"{payload.get('message')}", file=sys.stderr, flush=True)
                raise EndpointError(response.status, payload)
            return payload

    def view(self, epoch, wait):
        """This pod's view, as soon as it is newer than `epoch` (or after `wait` s)."""
        query = urllib.parse.urlencode({"epoch": epoch, "waitSeconds": int(wait)})
        return self.request("GET", f"{self.view_path}?{query}", timeout=wait + 15)

    def release(self, shard, epoch, checkpoint=None):
        """Acknowledges that this pod stopped reading `shard`, revoking at `epoch`.
        True when done: recorded (202), a duplicate (200), or nothing to do (409
        NotRevoking/StaleEpoch: the handoff completed another way)."""
        body = {"shard": shard, "epoch": epoch}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint
        try:
            self.request("POST", self.releases_path, body)
            return True
        except EndpointError as error:
            if error.status == 409 and error.reason in ("NotRevoking", "StaleEpoch"):
                return True
            raise


class Releases:
    """The acknowledgements of released shards, kept while the view still
    revokes their shard. An answered one is sent again if the shard is still
    revoking RESEND seconds later: the leader keeps acknowledgements in memory
    only, so after a leader change the new one needs them again (a repeat is
    answered as a duplicate)."""

    RESEND = 5.0

    def __init__(self, endpoint):
        self.endpoint, self.pending = endpoint, {}  # shard -> (epoch, checkpoint, due)

    def add(self, shard, epoch, checkpoint=None):
        self.pending[shard] = (epoch, checkpoint, 0.0)

    def send(self, view):
        revoking = set(view.current["revoking"]) if view.current else set()
        for shard in [s for s in self.pending if s not in revoking]:
            del self.pending[shard]  # the view moved on: nothing to acknowledge
        now = time.monotonic()
        for shard, (epoch, checkpoint, due) in list(self.pending.items()):
            if due > now:
                continue
            try:
                if self.endpoint.release(shard, epoch, checkpoint):
                    print(f"released {shard} at epoch {epoch}", file=sys.stderr, flush=True)
                    self.pending[shard] = (epoch, checkpoint, now + self.RESEND)
            except (OSError, http.client.HTTPException, EndpointError) as error:
                print(f"release of {shard} failed, retrying: {error}", file=sys.stderr, flush=True)
                return


class Backoff:
    """How long to wait after a failed view request: 0.1 s doubling to 5 s for
    what is transient (no answer, 5xx); 2 s doubling to 60 s for a refusal
    (401, 403, 404), except a 403 IpMismatch or NotMember in a pod's first
    NEW_POD seconds before its first answer, when the operator may not have
    seen the pod (or its IP) yet: 0.1 s doubling to 2 s. Jittered."""

    NEW_POD = 5.0

    def __init__(self, started):
        self.new_pod_until = started + self.NEW_POD
        self.delays = {}  # kind -> next full delay

    def succeeded(self):
        self.delays, self.new_pod_until = {}, 0.0

    def next(self, error, now):
        if isinstance(error, EndpointError) and error.status in (401, 403, 404):
            quick = (error.status == 403 and error.reason in ("IpMismatch", "NotMember")
                     and now < self.new_pod_until)
            kind, first, cap = ("new-pod", 0.1, 2.0) if quick else ("refused", 2.0, 60.0)
        else:
            kind, first, cap = "transient", 0.1, 5.0
        delay = self.delays.get(kind, first)
        self.delays[kind] = min(delay * 2, cap)
        return delay * random.uniform(0.5, 1)


def follow_endpoint(endpoint, view, wait, on_view=None):
    """Long-polls the view and offers each answer to `view` (epoch-fenced, so
    it runs beside the file); backs off with jitter while the endpoint fails."""
    epoch, backoff = 0, Backoff(time.monotonic())
    while True:
        try:
            answer = endpoint.view(epoch, wait)
        except (OSError, ValueError, http.client.HTTPException, EndpointError) as error:
            delay = backoff.next(error, time.monotonic())
            print(f"endpoint: {error}; retrying in {delay:.2f}s", file=sys.stderr, flush=True)
            time.sleep(delay)
            continue
        backoff.succeeded()
        if answer["epoch"] == 0:
            time.sleep(1)  # epoch 0 cannot be long-polled
        epoch = max(epoch, answer["epoch"])
        changed = view.offer(normalise(answer))
        if on_view is not None:
            on_view(view.current, answer.get("checkpoints", {}), changed)


def run_endpoint_only(args):
    """The endpoint alone, no AWS: print the active shards (with the checkpoint
    handed over with each) and acknowledge every revoke at once (this loop
    reads nothing; a real consumer stops reading and checkpoints first)."""
    endpoint = Endpoint(args.endpoint_url, args.endpoint_token_file, args.endpoint_ca_file,
                        args.shard_group)
    view, releases = View(), Releases(endpoint)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    def on_view(current, checkpoints, changed):
        if changed:
            print(f"view epoch {current['epoch']}: active {current['active']} "
                  f"revoking {current['revoking']} checkpoints {checkpoints}", flush=True)
            for shard in current["revoking"]:
                releases.add(shard, current["epoch"])  # your processing of `shard` stops here
        releases.send(view)  # after every answer: failed acknowledgements are retried

    follow_endpoint(endpoint, view, args.endpoint_wait, on_view)


# ------------------------------------------------------------------- leases


class Leases:
    """KCL-format leases: leaseKey, leaseOwner, leaseCounter, checkpoint, ...
    Every write is one conditional write."""

    def __init__(self, dynamodb, table, owner, failover_s):
        self.db, self.table, self.owner, self.failover = dynamodb, table, owner, failover_s
        self.held = {}  # shard -> (counter, time of the last successful write)
        self.seen = {}  # shard -> (owner, counter, first seen) for expiry

    def _fail(self, error):
        return error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"

    def take(self, shard, view: View):
        """Returns the checkpoint when taken, None when not (yet) possible,
        'SHARD_END' when the shard is complete."""
        if not view.can_acquire(shard):
            return None
        started = time.monotonic()
        item = self.db.get_item(TableName=self.table, Key={"leaseKey": {"S": shard}},
                                ConsistentRead=True).get("Item")
        try:
            if item is None:
                self.db.put_item(TableName=self.table, ConditionExpression="attribute_not_exists(leaseKey)",
                                 Item={"leaseKey": {"S": shard}, "leaseOwner": {"S": self.owner},
                                       "leaseCounter": {"N": "1"}, "checkpoint": {"S": "TRIM_HORIZON"},
                                       "checkpointSubSequenceNumber": {"N": "0"},
                                       "ownerSwitchesSinceCheckpoint": {"N": "0"}})
                self.held[shard] = (1, started)
                return "TRIM_HORIZON"
            checkpoint = item.get("checkpoint", {}).get("S", "TRIM_HORIZON")
            if checkpoint == "SHARD_END":
                return "SHARD_END"
            owner = item.get("leaseOwner", {}).get("S")
            counter = int(item.get("leaseCounter", {}).get("N", "0"))
            if owner and owner != self.owner:
                # Expired only once its counter stayed the same for the failover time.
                prev = self.seen.get(shard)
                if prev is None or prev[:2] != (owner, counter):
                    self.seen[shard] = (owner, counter, time.monotonic())
                    return None
                if time.monotonic() - prev[2] < self.failover:
                    return None
            values = {":me": {"S": self.owner}, ":c": {"N": str(counter)},
                      ":next": {"N": str(counter + 1)}}
            if owner:
                values[":o"] = {"S": owner}
                condition = "leaseCounter = :c AND leaseOwner = :o"
            else:
                condition = "leaseCounter = :c AND attribute_not_exists(leaseOwner)"
            self.db.update_item(TableName=self.table, Key={"leaseKey": {"S": shard}},
                                UpdateExpression="SET leaseOwner = :me, leaseCounter = :next",
                                ConditionExpression=condition, ExpressionAttributeValues=values)
            self.held[shard] = (counter + 1, started)
            return checkpoint
        except self.db.exceptions.ConditionalCheckFailedException:
            return None  # someone else won the race

    def _owner_write(self, shard, expression, values=None):
        counter, _ = self.held[shard]
        started = time.monotonic()
        try:
            self.db.update_item(TableName=self.table, Key={"leaseKey": {"S": shard}},
                                UpdateExpression="SET leaseCounter = :next" + expression,
                                ConditionExpression="leaseOwner = :me AND leaseCounter = :c",
                                ExpressionAttributeValues={":me": {"S": self.owner},
                                                           ":c": {"N": str(counter)},
                                                           ":next": {"N": str(counter + 1)},
                                                           **(values or {})})
            self.held[shard] = (counter + 1, started)
            return True
        except self.db.exceptions.ConditionalCheckFailedException:
            del self.held[shard]  # lost: stop reading it at once
            return False

    def valid(self, shard):
        """Our hold cannot have expired for others yet."""
        return shard in self.held and time.monotonic() - self.held[shard][1] < 0.9 * self.failover

    def renew(self, shard):
        return self._owner_write(shard, "")

    def checkpoint(self, shard, sequence):
        return self._owner_write(shard, ", checkpoint = :cp, checkpointSubSequenceNumber = :z, "
                                 "ownerSwitchesSinceCheckpoint = :z",
                                 {":cp": {"S": sequence}, ":z": {"N": "0"}})

    def release(self, shard):
        if self.held.pop(shard, None) is None:
            return
        try:
            self.db.update_item(TableName=self.table, Key={"leaseKey": {"S": shard}},
                                UpdateExpression="REMOVE leaseOwner SET leaseCounter = leaseCounter + :one",
                                ConditionExpression="leaseOwner = :me",
                                ExpressionAttributeValues={":me": {"S": self.owner}, ":one": {"N": "1"}})
        except self.db.exceptions.ConditionalCheckFailedException:
            pass  # already someone else's


# ------------------------------------------------------------------ the loop


def run(args):
    import boto3  # only the AWS part needs it

    session = boto3.session.Session(region_name=args.region)
    kinesis = session.client("kinesis", endpoint_url=args.kinesis_endpoint)
    leases = Leases(session.client("dynamodb", endpoint_url=args.dynamodb_endpoint),
                    args.lease_table, args.pod, args.failover)
    view, iterators, done, sessions = View(), {}, set(), {}
    draining_since = None
    releases, last_checkpoint = None, {}
    if args.endpoint_url:  # beside the file: the newest epoch wins
        endpoint = Endpoint(args.endpoint_url, args.endpoint_token_file, args.endpoint_ca_file,
                            args.shard_group)
        releases = Releases(endpoint)
        threading.Thread(target=follow_endpoint, args=(endpoint, view, args.endpoint_wait),
                         daemon=True).start()

    def on_term(*_):
        nonlocal draining_since
        draining_since = draining_since or time.monotonic()

    signal.signal(signal.SIGTERM, on_term)
    out = open(args.log, "a") if args.log else sys.stdout
    last_renew = time.monotonic()
    while True:
        if args.view_file:
            with open(args.view_file, "rb") as f:
                if view.offer(parse_view(f.read(), args.pod, args.shard_group)):
                    print(f"view epoch {view.current['epoch']}: {view.current}", file=sys.stderr)
        # 1. Revoked or gone: stop at once (every processed batch is already
        #    checkpointed) and release, so the operator can move the shard.
        for shard in [s for s in set(leases.held) | set(iterators)
                      if not view.can_acquire(s) or not leases.valid(s)]:
            iterators.pop(shard, None)
            leases.release(shard)
            if releases is not None and view.current and shard in view.current["revoking"]:
                releases.add(shard, view.current["epoch"], last_checkpoint.get(shard))
        if releases is not None:
            releases.send(view)  # acknowledge: the next owner starts at once
        if time.monotonic() - last_renew > args.failover / 3:
            last_renew = time.monotonic()
            for shard in list(leases.held):
                if not leases.renew(shard):
                    iterators.pop(shard, None)
        if draining_since is not None:
            if not leases.held or time.monotonic() - draining_since > args.drain_deadline:
                for shard in list(leases.held):
                    leases.release(shard)
                return
        else:
            # 2. Take the leases of active shards (free or expired only).
            for shard in view.current["active"] if view.current else []:
                if shard in leases.held or shard in done:
                    continue
                checkpoint = leases.take(shard, view)
                if checkpoint == "SHARD_END":
                    done.add(shard)
                elif checkpoint is not None:
                    sessions[shard] = leases.held[shard][0]  # identifies this hold in the log
                    kwargs = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                               "StartingSequenceNumber": checkpoint}
                              if checkpoint.isdigit() else {"ShardIteratorType": "TRIM_HORIZON"})
                    iterators[shard] = kinesis.get_shard_iterator(
                        StreamName=args.stream, ShardId=shard, **kwargs)["ShardIterator"]
        # 3. One GetRecords per held shard; process, then checkpoint.
        for shard, iterator in list(iterators.items()):
            if not leases.valid(shard):
                continue
            try:
                batch = kinesis.get_records(ShardIterator=iterator, Limit=1000)
            except kinesis.exceptions.ProvisionedThroughputExceededException:
                continue  # back off: next round
            now = time.time_ns()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now // 10**9)) + f".{now % 10**9:09d}Z"
            for record in batch["Records"]:  # your processing goes here
                out.write(json.dumps({"shard": shard, "sequenceNumber": record["SequenceNumber"],
                                      "partitionKey": record["PartitionKey"], "pod": args.pod,
                                      "session": sessions[shard], "time": stamp,
                                      "data": record["Data"].decode("utf-8", "replace")}) + "\n")
            out.flush()
            if batch["Records"]:
                if not leases.checkpoint(shard, batch["Records"][-1]["SequenceNumber"]):
                    iterators.pop(shard, None)
                    continue
                last_checkpoint[shard] = batch["Records"][-1]["SequenceNumber"]
            # Shard end: no next iterator (or child shards). Never compare
            # sequence numbers with EndingSequenceNumber.
            if batch.get("NextShardIterator") is None or batch.get("ChildShards"):
                leases.checkpoint(shard, "SHARD_END")
                leases.release(shard)
                iterators.pop(shard, None)
                done.add(shard)
            else:
                iterators[shard] = batch["NextShardIterator"]
        time.sleep(args.poll)


def self_test():
    doc = {"apiVersion": "shardring.io/v1alpha1", "kind": "Assignment", "shardGroup": "prod/orders",
           "epoch": 7, "pods": {"pod-a": {"active": ["s1"], "revoking": ["s2"]}}, "shards": {}}
    raw = json.dumps(doc).encode()
    assert parse_view(raw, "pod-a", "orders") == {"epoch": 7, "active": ["s1"], "standby": [],
                                                  "revoking": ["s2"]}
    assert parse_view(gzip.compress(raw), "pod-b", "orders")["active"] == []
    value = json.dumps({"epoch": 8, "active": ["s2"]})
    lines = f'a="b"\nassignment.shardring.io/orders={json.dumps(value)}\n'.encode()
    assert parse_view(lines, "pod-a", "prod/orders")["active"] == ["s2"]
    assert parse_view(value.encode(), "pod-a", "orders")["epoch"] == 8
    assert parse_view(b"", "pod-a", "orders") is None
    view = View()
    assert not view.can_acquire("s1")
    assert view.offer(parse_view(raw, "pod-a", "orders")) and view.can_acquire("s1")
    assert not view.can_acquire("s2")  # revoking
    assert not view.offer({"epoch": 6, "active": ["s2"], "standby": [], "revoking": []})
    assert view.current["epoch"] == 7  # never backwards
    backoff = Backoff(started=100.0)
    not_known = EndpointError(403, {"reason": "IpMismatch"})
    quick = [backoff.next(not_known, 100.5) for _ in range(4)]
    assert 0.05 <= quick[0] <= 0.1 and max(quick) <= 0.8, quick  # a new pod: quick
    assert backoff.next(not_known, 106.0) >= 1.0  # past its first seconds: a refusal
    backoff.succeeded()
    assert backoff.next(EndpointError(403, {"reason": "NotMember"}), 100.1) >= 1.0  # known
    assert backoff.next(OSError("reset"), 100.1) <= 0.1
    print("self-test passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("--pod", default=os.environ.get("POD_NAME"))
    parser.add_argument("--stream")
    parser.add_argument("--lease-table")
    parser.add_argument("--view-file", help="assignment.json(.gz) or the downward-API file")
    parser.add_argument("--shard-group", default="", help="needed for the annotations file")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    parser.add_argument("--kinesis-endpoint")
    parser.add_argument("--dynamodb-endpoint")
    parser.add_argument("--failover", type=float, default=10.0, help="lease failover, seconds")
    parser.add_argument("--drain-deadline", type=float, default=25.0, help="seconds after SIGTERM")
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between rounds")
    parser.add_argument("--log", help="append processed records as JSON lines here")
    parser.add_argument("--endpoint-url", default=os.environ.get("SHARDRING_ENDPOINT_URL"),
                        help="the consumer endpoint, e.g. https://shardring-endpoint.shardring-system.svc")
    parser.add_argument("--endpoint-token-file", default="/var/run/secrets/shardring.io/token")
    parser.add_argument("--endpoint-ca-file", default="/var/run/secrets/shardring.io/ca.crt")
    parser.add_argument("--endpoint-wait", type=int, default=30, help="long-poll seconds")
    args = parser.parse_args()
    if args.self_test:
        self_test()
    elif args.endpoint_url and not args.stream:
        run_endpoint_only(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
