"""Issue #10 item 4 (PIP-68): an earlier holder's accepted entries, still staged for the next
group commit or held in a flush that has not returned, are settled before the next holder's
PRODUCER_SUCCESS: none of them becomes durable after the grant.

Two test seams hold the old holder's entries back: a long group-commit wait (entries staged,
not appended), and a file layer whose fdatasync blocks until released (entries appended, the
flush held)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from broker.storage import Position
from protocol import commands, pb
from protocol.commands import ProducerAccessMode
from protocol.metadata import encode_entry
from tests.broker.storage.faults import HeldSync
from tests.helpers import BrokerThread, broker_config
from tests.raw_client import RawConnection, T, send_outcomes

pytestmark = [pytest.mark.integration]

GROUP_WAIT_MS = 300.0


def _entry(name: str, seq: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
    return encode_entry(metadata, f"{name}-{seq}".encode())


def _durable_position(running: BrokerThread, topic: str) -> Position | None:
    async def read() -> Position | None:
        assert running.broker is not None
        assert running.broker.service is not None
        return running.broker.service.topics[topic].ledger.last_confirmed_position

    return running.call(read)


@pytest.mark.parametrize("seam", ["staged", "flush-held"])
def test_no_entry_of_the_fenced_holder_is_durable_after_the_grant(
    tmp_path: Path, seam: str
) -> None:
    layer = HeldSync()
    running = BrokerThread(
        broker_config(tmp_path / "data", journal_max_group_wait_msec=GROUP_WAIT_MS),
        file_layer=layer,
    ).start()
    topic = f"persistent://public/default/staged-{uuid.uuid4().hex[:8]}"
    try:
        with RawConnection(running.port) as old, RawConnection(running.port) as new:
            old.handshake()
            new.handshake()
            old.send(
                commands.producer(
                    topic, 1, 1, producer_name="old", access_mode=ProducerAccessMode.Exclusive
                )
            )
            old.wait_for(T.PRODUCER_SUCCESS)
            old.send(commands.send(1, 0, _entry("old", 0)))
            old.wait_for(T.SEND_RECEIPT)
            if seam == "flush-held":
                layer.hold()
                old.send(commands.send(1, 1, _entry("old", 1)))
                assert layer.entered.wait(10)  # seq 1 is in a flush that does not return
            for seq in range(2, 5):  # staged behind it (or behind the group wait)
                old.send(commands.send(1, seq, _entry("old", seq)))
            new.send(
                commands.producer(
                    topic,
                    1,
                    1,
                    producer_name="new",
                    access_mode=ProducerAccessMode.ExclusiveWithFencing,
                )
            )
            if seam == "flush-held":
                layer.released.set()
            new.wait_for(T.PRODUCER_SUCCESS)
            durable_at_grant = _durable_position(running, topic)
            old.read_until(lambda f: len(send_outcomes(old)) == (5 if seam == "flush-held" else 4))
            old.send(commands.send(1, 5, _entry("old", 5)))  # fenced: never stored
            new.send(commands.send(1, 0, _entry("new", 0)))
            new.wait_for(T.SEND_RECEIPT)

        stored = {
            seq: position for seq, position in send_outcomes(old) if isinstance(position, str)
        }
        assert 5 not in stored
        assert durable_at_grant is not None
        for seq, text in stored.items():
            ledger_id, entry_id = (int(x) for x in text.split(":"))
            assert Position(ledger_id, entry_id) <= durable_at_grant, (
                f"old holder's seq {seq} at {text} became durable after the grant "
                f"(durable then: {durable_at_grant})"
            )
        assert len(stored) == (5 if seam == "flush-held" else 4)  # accepted ones all stored
    finally:
        layer.released.set()
        running.stop()
