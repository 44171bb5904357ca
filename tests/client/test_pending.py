"""``client.pending``: in-order receipt matching, ids, failures and the queue bound."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from client.errors import ChecksumError, Timeout
from client.message_id import MessageId
from client.pending import ChunkedSend, Completion, OutOfOrderReceipt, PendingSends, SendOp
from protocol.ids import MessageId as WireMessageId


def result(completion: Completion) -> MessageId:
    future = cast("asyncio.Future[MessageId]", completion)
    return future.result()


def op(sequence_id: int, count: int = 1, *, batch: bool = False) -> SendOp:
    loop = asyncio.get_running_loop()
    futures: list[Completion] = [loop.create_future() for _ in range(count)]
    return SendOp(
        sequence_id, b"frame", futures, sequence_id + count - 1, permits=count, is_batch=batch
    )


async def test_receipts_complete_the_oldest_operation_in_order() -> None:
    pending = PendingSends(10)
    first, second = op(1), op(2)
    for item in (first, second):
        pending.reserve()
        pending.append(item)
    assert pending.on_receipt(1, 5, 0, -1) is first
    assert result(first.futures[0]) == MessageId(-1, 5, 0)
    assert pending.on_receipt(1, 5, 0, -1) is None  # stale (already answered): ignored
    with pytest.raises(OutOfOrderReceipt):
        pending.on_receipt(3, 5, 2, -1)  # beyond the oldest: the connection is not trusted
    assert pending.oldest is second
    assert pending.on_receipt(2, 5, 1, -1) is second
    assert len(pending) == 0
    assert pending.messages == 0


async def test_a_duplicate_receipt_completes_with_minus_one() -> None:
    pending = PendingSends(10)
    item = op(7)
    pending.append(item)
    pending.on_receipt(7, -1, -1, -1)
    assert result(item.futures[0]) == MessageId(-1, -1, -1, -1)


async def test_a_batch_gives_each_message_its_index_and_the_batch_size() -> None:
    pending = PendingSends(10)
    batch = op(10, 3, batch=True)
    pending.reserve(3)
    pending.append(batch)
    pending.on_receipt(10, 4, 8, -1)
    ids = [result(future) for future in batch.futures]
    assert [message_id.batch_index() for message_id in ids] == [0, 1, 2]
    assert {message_id.batch_size() for message_id in ids} == {3}
    assert batch.last_sequence_id == 12
    assert pending.messages == 0


async def test_a_chunked_message_is_named_by_its_last_chunk_and_its_first() -> None:
    pending = PendingSends(10)
    shared = ChunkedSend()
    loop = asyncio.get_running_loop()
    future: asyncio.Future[MessageId] = loop.create_future()
    chunks = [
        SendOp(5, b"c0", [], 5, permits=0, chunks=shared),
        SendOp(5, b"c1", [future], 5, permits=1, chunks=shared),
    ]
    for chunk in chunks:
        pending.append(chunk)
    pending.on_receipt(5, 2, 10, -1)
    assert not future.done()
    pending.on_receipt(5, 2, 11, -1)
    assert future.result().wire == WireMessageId(2, 11)
    assert future.result().first_chunk() == WireMessageId(2, 10)


async def test_a_checksum_error_fails_only_its_operation() -> None:
    pending = PendingSends(10)
    bad, good = op(1), op(2)
    pending.append(bad)
    pending.append(good)
    pending.on_send_error(1, ChecksumError("corrupt"))
    with pytest.raises(ChecksumError):
        result(bad.futures[0])
    assert pending.oldest is good
    with pytest.raises(OutOfOrderReceipt):
        pending.on_send_error(9, ChecksumError("?"))


async def test_fail_all_fails_every_operation_and_flush_trackers() -> None:
    pending = PendingSends(10)
    items = [op(i) for i in range(3)]
    for item in items:
        pending.reserve()
        pending.append(item)
    tracker = pending.track_oldest_to_newest()
    assert tracker is not None
    assert pending.fail_all(Timeout("late")) == 3
    for item in items:
        with pytest.raises(Timeout):
            result(item.futures[0])
    with pytest.raises(Timeout):
        tracker.result()
    assert pending.messages == 0
    assert pending.track_oldest_to_newest() is None


async def test_a_flush_tracker_completes_with_the_newest_operation() -> None:
    pending = PendingSends(10)
    first, second = op(1), op(2)
    pending.append(first)
    pending.append(second)
    tracker = pending.track_oldest_to_newest()
    assert tracker is not None
    pending.on_receipt(1, 1, 0, -1)
    assert not tracker.done()
    pending.on_receipt(2, 1, 1, -1)
    assert tracker.done()
    assert tracker.result() is None


async def test_waiters_for_room_wake_one_per_freed_slot_and_cancelled_ones_drop_out() -> None:
    pending = PendingSends(1)
    pending.reserve()
    assert not pending.has_room()
    first = asyncio.ensure_future(pending.wait_for_room())
    second = asyncio.ensure_future(pending.wait_for_room())
    third = asyncio.ensure_future(pending.wait_for_room())
    await asyncio.sleep(0)
    pending.release(1)  # one slot: wakes the first waiter only
    await asyncio.sleep(0)
    assert first.done()
    assert not second.done()
    pending.reserve()  # the first waiter takes the slot
    second.cancel()  # a cancelled waiter is simply gone
    await asyncio.sleep(0)
    pending.release(1)
    await asyncio.wait_for(third, 1)


async def test_a_woken_waiter_cancelled_before_its_turn_hands_the_slot_on() -> None:
    pending = PendingSends(1)
    pending.reserve()
    first = asyncio.ensure_future(pending.wait_for_room())
    second = asyncio.ensure_future(pending.wait_for_room())
    await asyncio.sleep(0)
    pending.release(1)
    first.cancel()  # woken (its future has a result) but cancelled before it ran
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert first.cancelled()
    await asyncio.wait_for(second, 1)


async def test_waiters_fail_when_the_producer_stops() -> None:
    pending = PendingSends(1)
    pending.reserve()
    waiter = asyncio.ensure_future(pending.wait_for_room())
    await asyncio.sleep(0)
    pending.wake_all_waiters(Timeout("closing"))
    with pytest.raises(Timeout):
        await waiter
