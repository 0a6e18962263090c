#!/usr/bin/env python3
"""A shardring consumer in plain Python: reads the published JSON contract
(mounted ConfigMap file or downward-API annotation), takes KCL-format leases
in DynamoDB with conditional writes only for shards that are `active` at the
newest epoch, reads them from Kinesis from the checkpoint, and hands them
back at once when they appear in `revoking`. On SIGTERM it reads on until its
shards are revoked (or a deadline passes), then checkpoints, releases, exits.

Walkthrough: docs/consumer.md. Needs boto3 for AWS; `--self-test` checks the
contract logic (parsing, epoch fencing, can_acquire) with the standard library
only.

    python3 consumer.py --pod "$POD_NAME" --stream orders --lease-table orders-leases \
        --view-file /etc/shardring/assignment.json
"""

import argparse
import gzip
import json
import os
import signal
import sys
import time

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

    def on_term(*_):
        nonlocal draining_since
        draining_since = draining_since or time.monotonic()

    signal.signal(signal.SIGTERM, on_term)
    out = open(args.log, "a") if args.log else sys.stdout
    last_renew = time.monotonic()
    while True:
        with open(args.view_file, "rb") as f:
            if view.offer(parse_view(f.read(), args.pod, args.shard_group)):
                print(f"view epoch {view.current['epoch']}: {view.current}", file=sys.stderr)
        # 1. Revoked or gone: stop at once (every processed batch is already
        #    checkpointed) and release, so the operator can move the shard.
        for shard in [s for s in set(leases.held) | set(iterators)
                      if not view.can_acquire(s) or not leases.valid(s)]:
            iterators.pop(shard, None)
            leases.release(shard)
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
            if batch["Records"] and not leases.checkpoint(shard, batch["Records"][-1]["SequenceNumber"]):
                iterators.pop(shard, None)
                continue
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
    args = parser.parse_args()
    if args.self_test:
        self_test()
    else:
        run(args)


if __name__ == "__main__":
    main()
