"""``BatchingType.KeyBased`` (client.key_based_batching): one batch per key, drained together,
each batch named by its highest sequence id so PIP-6 dedup sees them in order."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from client import BatchingType
from client.accumulator import EntryContext
from client.batching import OutgoingMessage
from client.key_based_batching import KeyBasedAccumulator
from client.message_id import MessageId
from client.pending import SendOp
from client.producer.config import ProducerOptions
from protocol.batch import decode_batch
from protocol.enums import CompressionType
from protocol.framing import FrameDecoder
from protocol.metadata import decode_entry


@dataclass
class Done:
    """A ``Completion`` that records its outcome."""

    results: list[MessageId] = field(default_factory=list)

    def done(self) -> bool:
        return bool(self.results)

    def set_result(self, result: MessageId, /) -> None:
        self.results.append(result)

    def set_exception(self, exception: BaseException, /) -> None:
        raise AssertionError(exception)


def accumulator(
    max_messages: int = 100, max_bytes: int = 1 << 20, delay: int = 10
) -> KeyBasedAccumulator:
    context = EntryContext(
        producer_id=1,
        producer_name="p",
        codec=CompressionType.NONE,
        schema_version=None,
        max_message_size=lambda: 5 << 20,
    )
    return KeyBasedAccumulator(
        context, max_messages=max_messages, max_bytes=max_bytes, max_publish_delay_ms=delay
    )


def message(sequence_id: int, key: str | None, *, ordering: bytes | None = None) -> OutgoingMessage:
    return OutgoingMessage(
        payload=f"m{sequence_id}".encode(),
        sequence_id=sequence_id,
        partition_key=key,
        ordering_key=ordering,
    )


def sent(op: SendOp) -> tuple[int, int, int, list[tuple[int | None, str | None]]]:
    """(SEND sequence id, SEND highest, metadata sequence id, [(message id, key)])."""
    decoder = FrameDecoder()
    decoder.feed(op.frame)
    (frame,) = list(decoder)
    assert frame.entry is not None
    metadata, payload = decode_entry(frame.entry)
    singles = decode_batch(payload, metadata.num_messages_in_batch)
    send = frame.command.send
    return (
        send.sequence_id,
        send.highest_sequence_id,
        metadata.sequence_id,
        [(s.sequence_id, s.partition_key) for s in singles],
    )


def test_interleaved_keys_go_out_as_one_batch_per_key_ordered_by_highest_id() -> None:
    acc = accumulator()
    for seq, key in enumerate(["A", "B", "B", "A", "A", None, "B"]):
        assert acc.add(message(seq, key), Done(), now_ms=0) == []
    ops = acc.drain()
    assert [sent(op) for op in ops] == [
        (4, 4, 4, [(0, "A"), (3, "A"), (4, "A")]),
        (5, 5, 5, [(5, None)]),
        (6, 6, 6, [(1, "B"), (2, "B"), (6, "B")]),
    ]
    assert [op.last_sequence_id for op in ops] == [4, 5, 6]
    assert [op.permits for op in ops] == [3, 1, 3]
    assert len(acc) == 0
    assert acc.drain() == []


def test_each_sender_gets_its_index_in_its_key_batch() -> None:
    acc = accumulator()
    futures = [Done() for _ in range(4)]
    for seq, (key, future) in enumerate(zip(["A", "B", "A", "B"], futures, strict=True)):
        acc.add(message(seq, key), future, now_ms=0)
    for entry_id, op in enumerate(acc.drain()):
        op.succeed(7, entry_id, -1)
    assert [(f.results[0].entry_id(), f.results[0].batch_index()) for f in futures] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
    ]


def test_the_ordering_key_groups_before_the_partition_key() -> None:
    acc = accumulator()
    acc.add(message(0, "A", ordering=b"o"), Done(), now_ms=0)
    acc.add(message(1, "B", ordering=b"o"), Done(), now_ms=0)
    acc.add(message(2, "o"), Done(), now_ms=0)  # the same bytes as a key: the same hash
    (op,) = acc.drain()
    assert [seq for seq, _ in sent(op)[3]] == [0, 1, 2]


def test_the_count_trigger_counts_every_key() -> None:
    acc = accumulator(max_messages=3)
    assert acc.add(message(0, "A"), Done(), now_ms=0) == []
    assert acc.add(message(1, "B"), Done(), now_ms=0) == []
    ops = acc.add(message(2, "C"), Done(), now_ms=0)
    assert [sent(op)[0] for op in ops] == [0, 1, 2]


def test_a_message_that_does_not_fit_sends_what_is_held_first() -> None:
    acc = accumulator(max_bytes=60)
    assert acc.add(message(0, "A"), Done(), now_ms=0) == []
    ops = acc.add(OutgoingMessage(b"x" * 40, 1, partition_key="B"), Done(), now_ms=0)
    assert [sent(op)[0] for op in ops] == [0]
    assert len(acc) == 1


def test_an_id_going_back_sends_what_is_held_first() -> None:
    acc = accumulator()
    acc.add(message(10, "A"), Done(), now_ms=0)
    ops = acc.add(message(5, "B"), Done(), now_ms=0)
    assert [sent(op)[0] for op in ops] == [10]
    assert [sent(op)[0] for op in acc.drain()] == [5]


def test_a_delayed_message_goes_alone_after_what_is_held() -> None:
    acc = accumulator()
    acc.add(message(0, "A"), Done(), now_ms=0)
    delayed = OutgoingMessage(b"later", 1, partition_key="A", deliver_at_time=99)
    ops = acc.add(delayed, Done(), now_ms=0)
    assert [(op.sequence_id, op.is_batch) for op in ops] == [(0, True), (1, False)]


def test_the_delay_trigger_runs_from_the_oldest_held_message() -> None:
    acc = accumulator(delay=10)
    assert acc.deadline is None
    acc.add(message(0, "A"), Done(), now_ms=100)
    acc.add(message(1, "B"), Done(), now_ms=105)
    assert acc.deadline == 110
    acc.drain()
    assert acc.deadline is None


def test_producer_options_take_the_official_batching_type() -> None:
    options = ProducerOptions("t", batching_enabled=True, batching_type=BatchingType.KeyBased)
    assert options.producer_config().batching_type == BatchingType.KeyBased
    assert ProducerOptions("t").producer_config().batching_type == BatchingType.Default
    with pytest.raises(ValueError, match="batching_type"):
        ProducerOptions("t", batching_type="KeyBased")  # type: ignore[arg-type]
