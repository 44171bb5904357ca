"""PIP-68's example: leader election with a WaitForExclusive producer, state in a compacted topic.

Run several copies against one topic; exactly one is the leader at a time::

    python examples/leader_state.py --name a &
    python examples/leader_state.py --name b &
    python examples/leader_state.py --name c &

Each candidate asks for the topic with ``access_mode=WaitForExclusive``: the broker grants it to
one and queues the others (PIP-68). The leader then

1. rebuilds its state, a map ``key -> {"counter": n, ...}``, with a **compacted reader**
   (``is_read_compacted=True``): the latest value of each key up to the compaction horizon, then
   the log after it, so the rebuild stays short however long the topic gets;
2. uses the producer as its write-ahead log: every update is *sent first* and applied to the
   map only once the broker confirmed it. An update increments a key's counter (or, every
   ``--delete-every`` updates, deletes the key with an empty value: compaction removes it).

When the leader dies (``kill -9``), its connection drops, the broker promotes the next waiter,
and that one rebuilds the complete state before writing: whatever the old leader got confirmed
is in the log, and nothing the old leader sends can land after the new leader's grant (the
broker fences it). The topic is compacted by the broker (``magnetar-admin topics compact`` or
``brokerServiceCompactionThresholdInBytes``), which keeps the rebuild cheap.

Progress goes to stdout, one line per event: ``WAITING``, ``LEADER <epoch> <keys> <counter sum>``,
``WROTE <key> <counter>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from typing import Any

from client import MessageId
from client.sync import Client
from protocol.enums import ProducerAccessMode

State = dict[str, dict[str, Any]]


def say(*words: object) -> None:
    print(*words, flush=True)


def rebuild(client: Client, topic: str) -> State:
    """The state the previous leaders left: a compacted reader from the earliest message."""
    state: State = {}
    reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True)
    try:
        while reader.has_message_available():
            message = reader.read_next(10_000)
            key = message.partition_key()
            if not message.data():
                state.pop(key, None)
            else:
                state[key] = json.loads(message.data())
    finally:
        reader.close()
    return state


def topic_epoch(admin_url: str, topic: str) -> int:
    """The PIP-68 epoch this leader holds (from the topic stats)."""
    path = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{admin_url}/admin/v2/persistent/{path}/stats") as response:
        epoch: int = json.loads(response.read())["producerAccess"]["topicEpoch"]
    return epoch


def lead(args: argparse.Namespace) -> None:
    client = Client(args.service_url, operation_timeout_seconds=3600)
    try:
        say("WAITING")
        producer = client.create_producer(
            args.topic,
            producer_name=args.name,
            access_mode=ProducerAccessMode.WaitForExclusive,
            send_timeout_millis=0,
        )
        epoch = topic_epoch(args.admin_url, args.topic)
        state = rebuild(client, args.topic)
        say("LEADER", epoch, len(state), sum(v["counter"] for v in state.values()))
        for seq in range(args.updates):
            key = f"key-{seq % args.keys}"
            if args.delete_every and seq % args.delete_every == args.delete_every - 1:
                producer.send(b"", partition_key=key)  # write-ahead, then apply
                state.pop(key, None)
                say("WROTE", key, 0)
                continue
            value = {
                "counter": state.get(key, {"counter": 0})["counter"] + 1,
                "leader": args.name,
                "epoch": epoch,
            }
            producer.send(json.dumps(value).encode(), partition_key=key)
            state[key] = value
            say("WROTE", key, value["counter"])
        producer.close()
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--service-url", default="pulsar://localhost:6650")
    parser.add_argument("--admin-url", default="http://localhost:8080")
    parser.add_argument("--topic", default="persistent://public/default/leader-state")
    parser.add_argument("--name", required=True, help="this candidate's producer name")
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--delete-every", type=int, default=7)
    lead(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
