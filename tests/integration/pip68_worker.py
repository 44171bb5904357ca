"""One candidate of the PIP-68 leader example, run as a separate process by
``test_exclusive_leaders.py``.

The worker competes for the topic with a WaitForExclusive producer. Once it holds the topic it is
the leader: it rebuilds its state by reading the whole topic with a reader (here the state is
just the number of entries written so far), learns its topic epoch from the admin stats, and then
appends entries, each a JSON object::

    {"worker": <id>, "epoch": <topic epoch>, "seq": <n-th entry of this leader>,
     "index": <where this leader believes the entry lands in the log>}

Up to ``--window`` sends are in flight at once. It runs until it is killed (the test SIGKILLs
leaders one after another) or fenced. Progress goes to stdout, one line per event, flushed:
``WAITING``, ``LEADER <epoch> <rebuilt>``, ``WROTE <seq>``, ``FENCED <result>``.

tests/cluster/test_exclusive_leaders.py runs it too, against several brokers (``--admin-url`` a
comma-separated list).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repo root

from tests.helpers import wait_until


def say(*words: object) -> None:
    print(*words, flush=True)


def holder_epoch(admin_urls: str, topic: str, name: str) -> int:
    """The topic epoch from the stats; this worker must be the holder.

    ``admin_urls``: one URL, or (a cluster, tests/cluster) several separated by commas, tried
    in turn: any broker redirects the call to the owner, but one being killed answers nothing.
    """
    path = topic.removeprefix("persistent://")
    access: dict[str, object] = {}

    def answered() -> bool:
        for admin_url in admin_urls.split(","):
            url = f"{admin_url}/admin/v2/persistent/{path}/stats"
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    access.update(json.loads(response.read())["producerAccess"])
                return True
            except OSError:
                continue  # that broker is down (being killed and restarted by the test)
        return False

    wait_until(answered, 60)
    if access["exclusiveHolder"] != name:
        raise RuntimeError(f"{name} was promoted but the holder is {access['exclusiveHolder']}")
    epoch = access["topicEpoch"]
    assert isinstance(epoch, int)
    return epoch


def rebuild_state(client: pulsar.Client, topic: str) -> int:
    """Read everything the previous leaders left; the state is the number of entries."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        count = 0
        while reader.has_message_available():
            reader.read_next(10_000)
            count += 1
        return count
    finally:
        reader.close()


def lead(client: pulsar.Client, producer: pulsar.Producer, args: argparse.Namespace) -> int:
    name = producer.producer_name()
    epoch = holder_epoch(args.admin_url, args.topic, name)
    index = rebuild_state(client, args.topic)
    say("LEADER", epoch, index)
    # Pipelined like a real leader: up to ``window`` sends in flight, receipts in order.
    in_flight = threading.BoundedSemaphore(args.window)
    fenced = threading.Event()
    failure: list[pulsar.Result] = []

    def on_receipt(seq: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                say("WROTE", seq)
            else:
                failure.append(result)
                fenced.set()
            in_flight.release()

        return done

    seq = 0
    while args.max_entries is None or seq < args.max_entries:
        in_flight.acquire()
        if fenced.is_set():
            say("FENCED", failure[0] if failure else "")
            return 3
        entry = {"worker": args.worker_id, "epoch": epoch, "seq": seq, "index": index + seq}
        producer.send_async(json.dumps(entry).encode(), on_receipt(seq))
        seq += 1
    producer.flush()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--service-url", required=True)
    parser.add_argument("--admin-url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--max-entries", type=int, default=None)
    parser.add_argument("--window", type=int, default=20, help="sends in flight at most")
    args = parser.parse_args(argv)
    # C++ 4.2.0 fails a producer still queued after the operation timeout, so a candidate that
    # may wait through several leaders needs a long one.
    client = pulsar.Client(
        args.service_url,
        operation_timeout_seconds=300,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        say("WAITING")
        producer = client.create_producer(
            args.topic,
            producer_name=f"worker-{args.worker_id}",
            access_mode=pulsar.ProducerAccessMode.WaitForExclusive,
        )
        return lead(client, producer, args)
    finally:
        with contextlib.suppress(pulsar.AlreadyClosed):  # C++ 4.2.0 after a fenced producer
            client.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
