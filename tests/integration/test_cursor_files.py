"""Subscription cursor files are written and deleted off the event loop (issue #10, item 5):
while the disk does not answer, SUBSCRIBE and UNSUBSCRIBE wait, and the broker keeps serving
everybody else; two SUBSCRIBEs racing for one new name still get one cursor."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker.storage import cursor_file
from broker.storage.paths import topic_directory
from protocol import commands, pb
from protocol.errors import ServerError
from protocol.topic_name import TopicName
from tests.broker.storage.faults import HeldSync
from tests.helpers import BrokerThread, broker_config
from tests.raw_client import RawSession, T

pytestmark = [pytest.mark.integration]

SHARED = pb.CommandSubscribe.Shared


def _still_served(port: int, topic: str) -> None:
    """Another connection gets its PONG and its LOOKUP answered meanwhile."""
    with RawSession(port) as other:
        assert other.is_usable()
        reply = other.request(commands.lookup(topic, 77), 77)
        assert reply.type == T.LOOKUP_RESPONSE


def test_subscribe_and_unsubscribe_wait_for_the_disk_not_the_loop(tmp_path: Path) -> None:
    layer = HeldSync()
    running = BrokerThread(broker_config(tmp_path / "data"), file_layer=layer).start()
    topic = f"persistent://public/default/cursors-{uuid.uuid4().hex[:8]}"
    cursor_path = cursor_file(
        topic_directory(running.config.data_path, TopicName.parse(topic)), "sub"
    )
    try:
        with RawSession(running.port) as first, RawSession(running.port) as second:
            first.request(commands.subscribe(topic, "warm-up", 9, 9, SHARED), 9)  # load it
            layer.hold()
            first.send(commands.subscribe(topic, "sub", 1, 1, SHARED))
            assert layer.entered.wait(10)  # the cursor file's fsync is waiting
            second.send(commands.subscribe(topic, "sub", 2, 2, SHARED))
            _still_served(running.port, topic)
            assert not cursor_path.exists()  # temp file written, its fsync held: no rename yet
            layer.release()
            assert first.reply_to(1).type == T.SUCCESS
            assert second.reply_to(2).type == T.SUCCESS

            async def consumers_of_sub() -> int:
                assert running.broker is not None
                assert running.broker.service is not None
                return len(running.broker.service.topics[topic].subscriptions["sub"].consumers)

            assert running.call(consumers_of_sub) == 2  # one subscription, one cursor, for both
            files = sorted(p.name for p in cursor_path.parent.glob("*.cursor"))
            expected = [cursor_file(cursor_path.parent.parent, n).name for n in ("sub", "warm-up")]
            reserved = ("dedup", "idempotency")  # PIP-6 and issue #16 snapshot cursors
            assert [f for f in files if not any(r in f for r in reserved)] == sorted(expected)

            second.send(commands.close_consumer(2, 3))
            assert second.reply_to(3).type == T.SUCCESS
            layer.hold()
            first.send(commands.unsubscribe(1, 4))
            assert layer.entered.wait(10)  # the directory fsync after the unlink waits
            _still_served(running.port, topic)
            layer.release()
            assert first.reply_to(4).type == T.SUCCESS
            assert not cursor_path.exists()
    finally:
        layer.release()
        running.stop()


def test_the_dedup_cursor_name_is_reserved(tmp_path: Path) -> None:
    running = BrokerThread(broker_config(tmp_path / "data")).start()
    try:
        with RawSession(running.port) as session:
            topic = f"persistent://public/default/reserved-{uuid.uuid4().hex[:8]}"
            reply = session.request(commands.subscribe(topic, "pulsar.dedup", 1, 1, SHARED), 1)
            assert reply.type == T.ERROR
            assert reply.command.error.error == ServerError.NotAllowedError
    finally:
        running.stop()
