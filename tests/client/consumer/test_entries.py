"""``StartFilter``: what a reader does not hand out, from where it resumes."""

from __future__ import annotations

from client.consumer.config import ConsumerConfig
from client.consumer.entries import StartFilter
from client.message_id import MessageId


def reader(start: MessageId, inclusive: bool = False) -> StartFilter:
    return StartFilter(
        ConsumerConfig(
            "reader-sub",
            durable=False,
            start_message_id=start,
            start_message_id_inclusive=inclusive,
        )
    )


def in_batch(entry: int, index: int) -> MessageId:
    return MessageId.of_entry(1, entry, index, 3, -1)


def test_exclusive_and_inclusive_starts() -> None:
    start = MessageId(-1, 1, 5)
    assert reader(start).before(MessageId(-1, 1, 5))
    assert not reader(start).before(MessageId(-1, 1, 6))
    assert not reader(start, inclusive=True).before(MessageId(-1, 1, 5))
    assert reader(start, inclusive=True).before(MessageId(-1, 1, 4))


def test_a_whole_entry_start_against_a_batch_takes_the_entry_as_the_start() -> None:
    start = MessageId(-1, 1, 5)
    assert all(reader(start).before(in_batch(5, i)) for i in range(3))
    assert not any(reader(start, inclusive=True).before(in_batch(5, i)) for i in range(3))
    assert not reader(start).before(in_batch(6, 0))


def test_earliest_latest_and_durable_subscriptions_filter_nothing() -> None:
    assert not reader(MessageId.earliest).before(MessageId(-1, 0, 0))
    assert not reader(MessageId.latest).before(MessageId(-1, 0, 0))
    durable = StartFilter(ConsumerConfig("sub", start_message_id=MessageId(-1, 1, 5)))
    assert not durable.active  # the decoder asks `before` only of an active filter


def test_a_seek_by_id_makes_a_durable_consumer_filter_as_the_cpp_one_does() -> None:
    durable = StartFilter(ConsumerConfig("sub"))
    durable.move_to(MessageId(-1, 1, 5), inclusive=False)
    assert durable.active
    assert durable.before(MessageId(-1, 1, 5))
    assert not durable.before(MessageId(-1, 1, 6))


def test_seeks_and_resumption() -> None:
    start = reader(MessageId(-1, 1, 5), inclusive=True)
    assert start.resume_after(None) == MessageId(-1, 1, 5)
    assert start.resume_after(MessageId(-1, 1, 7)) == MessageId(-1, 1, 7)
    assert (start.start, start.inclusive) == (MessageId(-1, 1, 7), False)
    start.turn_off()
    assert not start.active
    assert start.resume_after(None) == MessageId.earliest
    start.move_to(MessageId(-1, 2, 0), inclusive=True)
    assert start.active
    assert not start.before(MessageId(-1, 2, 0))
