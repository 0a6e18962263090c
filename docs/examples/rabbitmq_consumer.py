#!/usr/bin/env python3
"""A shardring consumer of RabbitMQ partition queues in plain Python (pika):
long-polls its view from the operator's consumer endpoint (the Endpoint,
View and Releases of consumer.py beside it), consumes exactly the queues
the newest view lists `active`, each on a channel of its own with manual
acknowledgements, a bounded prefetch and an exclusive consumer, and acks
every message once it is handled. When a queue leaves `active` it finishes
the message in hand and closes the queue's channel: the broker's close-ok
comes after every acknowledgement sent before it, and the messages delivered
but not handled go back to the queue in order. Only then does it acknowledge
the release at the endpoint, so the next owner starts with the first message
this pod did not acknowledge. On SIGTERM it consumes on until its queues are
revoked (or a deadline passes), then releases them and exits.

With --log it appends one JSON line per handled message and one per end of
a hold, the format of the Rust queue worker's log, which the queue checker
(shardring_consumer::rabbitmq::verdict) reads. Walkthrough: docs/rabbitmq.md.
Needs pika (`apt-get install python3-pika` or `pip install pika`).

    python3 rabbitmq_consumer.py --pod "$POD_NAME" --shard-group prod/orders \\
        --rabbitmq-url amqp://app:secret@rabbitmq.messaging.svc:5672/orders \\
        --endpoint-url https://shardring-endpoint.shardring-system.svc
"""

import argparse
import datetime
import itertools
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consumer import Endpoint, Releases, View, follow_endpoint  # noqa: E402

import pika  # noqa: E402

SESSIONS = itertools.count()


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Log:
    """The queue log: a line per handled message, a line per end of a hold."""

    def __init__(self, path, pod):
        self.file = open(path, "a") if path else None
        self.pod = pod

    def write(self, line):
        if self.file:
            self.file.write(json.dumps(line) + "\n")
            self.file.flush()  # before the message is acknowledged

    def handled(self, queue, session, properties, body, routing_key):
        self.write({"shard": queue, "sequenceNumber": properties.message_id or "",
                    "partitionKey": routing_key, "pod": self.pod, "session": session,
                    "time": now_rfc3339(), "data": body.decode("utf-8", "replace")})

    def ended(self, queue, session, clean):
        self.write({"ended": queue, "pod": self.pod, "session": session,
                    "clean": clean, "time": now_rfc3339()})


class Hold:
    """One queue consumed on a channel of its own: at most `prefetch`
    messages unacknowledged, and an exclusive consumer (the broker refuses
    a second one while this one holds the queue)."""

    def __init__(self, connection, queue, prefetch, pod, log):
        self.queue, self.log = queue, log
        self.session = int(time.time() * 1000) * 1000 + next(SESSIONS) % 1000
        self.channel = connection.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.channel.basic_consume(queue, self.on_message, auto_ack=False, exclusive=True,
                                   consumer_tag=f"{pod}/{self.session}")

    def on_message(self, channel, method, properties, body):
        # Your processing of the message goes here; it is acknowledged after.
        self.log.handled(self.queue, self.session, properties, body, method.routing_key)
        channel.basic_ack(method.delivery_tag)

    def release(self):
        """Closes the channel (the consumer with it); True once the broker
        confirmed: every ack is in, the rest is back in the queue in order."""
        try:
            self.channel.close()
            clean = True
        except pika.exceptions.AMQPError as error:
            print(f"closing {self.queue}'s channel failed: {error}", file=sys.stderr, flush=True)
            clean = False
        self.log.ended(self.queue, self.session, clean)
        return clean


def run(args):
    view = View()
    # Two endpoint clients: the long-poll runs on a thread of its own, the
    # releases go from the main loop.
    poller = Endpoint(args.endpoint_url, args.endpoint_token_file, args.endpoint_ca_file,
                      args.shard_group)
    releases = Releases(Endpoint(args.endpoint_url, args.endpoint_token_file,
                                 args.endpoint_ca_file, args.shard_group))
    threading.Thread(target=follow_endpoint, args=(poller, view, args.endpoint_wait),
                     daemon=True).start()
    log = Log(args.log, args.pod)
    stopping = {"since": None}
    signal.signal(signal.SIGTERM, lambda *_: stopping.update(since=stopping["since"] or time.monotonic()))
    connection = pika.BlockingConnection(pika.URLParameters(args.rabbitmq_url))
    holds = {}
    while True:
        # Deliveries: each message is handled and acknowledged in its callback.
        connection.process_data_events(time_limit=args.poll)
        current = view.current
        for queue in [q for q in holds if not view.can_acquire(q)]:
            holds.pop(queue).release()  # the message in hand is done: callbacks run one at a time
            print(f"released {queue}", file=sys.stderr, flush=True)
            if current and queue in current["revoking"]:
                releases.add(queue, current["epoch"])
        draining = stopping["since"] is not None
        if current and not draining:
            for queue in current["active"]:
                if queue not in holds and view.can_acquire(queue):
                    try:
                        holds[queue] = Hold(connection, queue, args.prefetch, args.pod, log)
                        print(f"consuming {queue} at epoch {current['epoch']}", file=sys.stderr,
                              flush=True)
                    except pika.exceptions.ChannelClosed as error:
                        # Another consumer still holds it, or it is gone: next round.
                        print(f"cannot consume {queue} yet: {error}", file=sys.stderr, flush=True)
        releases.send(view)
        if draining and (not holds or time.monotonic() - stopping["since"] > args.drain_deadline):
            for queue in list(holds):
                holds.pop(queue).release()
            releases.send(view)
            connection.close()
            return


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pod", default=os.environ.get("POD_NAME"))
    parser.add_argument("--shard-group", required=True, help="<namespace>/<name>")
    parser.add_argument("--rabbitmq-url", required=True,
                        help="amqp://user:password@host:5672/<vhost>")
    parser.add_argument("--prefetch", type=int, default=20,
                        help="most messages unacknowledged per queue")
    parser.add_argument("--endpoint-url", default=os.environ.get("SHARDRING_ENDPOINT_URL"),
                        required="SHARDRING_ENDPOINT_URL" not in os.environ)
    parser.add_argument("--endpoint-token-file", default="/var/run/secrets/shardring.io/token")
    parser.add_argument("--endpoint-ca-file", default="/var/run/secrets/shardring.io/ca.crt")
    parser.add_argument("--endpoint-wait", type=int, default=30, help="long-poll seconds")
    parser.add_argument("--poll", type=float, default=0.05,
                        help="seconds a round waits for messages before it looks at the view")
    parser.add_argument("--drain-deadline", type=float, default=25.0, help="seconds after SIGTERM")
    parser.add_argument("--log", help="append handled messages and hold ends as JSON lines here")
    args = parser.parse_args()
    if not args.pod:
        parser.error("--pod (or POD_NAME) is required")
    run(args)


if __name__ == "__main__":
    main()
