"""Builders of protocol.commands.consumers: each one round-trips with the right fields."""

from __future__ import annotations

import pytest

from protocol import commands, pb
from protocol.commands import consumers as commands_consumers
from protocol.enums import AckType, InitialPosition, KeySharedMode, SubType
from protocol.errors import LocalProtocolError
from protocol.ids import MessageId
from tests.protocol.commands.frames import U64_MINUS_ONE, T, decode_one, entry, sub


def test_subscribe() -> None:
    request = sub(
        commands.subscribe(
            "persistent://public/default/t",
            "sub",
            1,
            2,
            SubType.Key_Shared,
            consumer_name="c",
            initial_position=InitialPosition.Earliest,
            key_shared_meta=pb.KeySharedMeta(keySharedMode=pb.STICKY),
        ),
        T.SUBSCRIBE,
    )
    assert (request.subscription, request.consumer_id, request.request_id) == ("sub", 1, 2)
    assert request.subType == SubType.Key_Shared
    assert request.initialPosition == InitialPosition.Earliest
    assert request.durable
    assert request.keySharedMeta.keySharedMode == pb.STICKY
    assert not request.HasField("start_message_id")


def test_key_shared_meta_carries_mode_ranges_and_the_out_of_order_flag() -> None:
    meta = commands_consumers.key_shared_meta(
        KeySharedMode.Sticky, [(0, 99), (200, 65535)], allow_out_of_order_delivery=True
    )
    request = sub(
        commands.subscribe("t", "s", 1, 2, SubType.Key_Shared, key_shared_meta=meta), T.SUBSCRIBE
    )
    ksm = request.keySharedMeta
    assert ksm.keySharedMode == pb.STICKY
    assert [(r.start, r.end) for r in ksm.hashRanges] == [(0, 99), (200, 65535)]
    assert ksm.allowOutOfOrderDelivery


def test_key_shared_meta_always_states_the_out_of_order_flag() -> None:
    """As the C++ client: false is written too, and AUTO_SPLIT is the default mode."""
    meta = commands_consumers.key_shared_meta()
    assert meta.keySharedMode == pb.AUTO_SPLIT
    assert meta.HasField("allowOutOfOrderDelivery")
    assert not meta.allowOutOfOrderDelivery
    assert not meta.hashRanges


def test_subscribe_reader_from_earliest() -> None:
    request = sub(
        commands.subscribe(
            "t",
            "reader-1",
            0,
            0,
            SubType.Exclusive,
            durable=False,
            start_message_id=MessageId.earliest,
        ),
        T.SUBSCRIBE,
    )
    assert not request.durable
    assert request.start_message_id.ledgerId == U64_MINUS_ONE
    assert request.start_message_id.entryId == U64_MINUS_ONE
    assert MessageId.from_pb(request.start_message_id) == MessageId.earliest


def test_flow() -> None:
    flow = sub(commands.flow(3, 1000), T.FLOW)
    assert (flow.consumer_id, flow.messagePermits) == (3, 1000)


def test_message_relays_entry_and_ack_set() -> None:
    frame = decode_one(commands.message(2, MessageId(7, 1), entry(), 3, ack_set=[0b101]))
    message = frame.command.message
    assert message.consumer_id == 2
    assert MessageId.from_pb(message.message_id) == MessageId(7, 1)
    assert not message.message_id.HasField("partition")
    assert message.redelivery_count == 3
    assert list(message.ack_set) == [5]
    assert frame.entry == entry()
    assert frame.checksum_valid


def test_message_ack_set_accepts_unsigned_words() -> None:
    frame = decode_one(commands.message(2, MessageId(7, 1), entry(), ack_set=[2**63]))
    assert list(frame.command.message.ack_set) == [-(2**63)]


def test_message_defaults_leave_optional_fields_out() -> None:
    message = decode_one(commands.message(2, MessageId(7, 1), entry())).command.message
    assert not message.HasField("redelivery_count")
    assert not message.ack_set


def test_ack_individual_with_batch_ack_set() -> None:
    request = sub(commands.ack(0, [MessageId(7, 0), (MessageId(7, 1, batch_index=2), [4])]), T.ACK)
    assert request.ack_type == AckType.Individual
    first, second = request.message_id
    assert (first.ledgerId, first.entryId, list(first.ack_set)) == (7, 0, [])
    assert (second.ledgerId, second.entryId, list(second.ack_set)) == (7, 1, [4])
    assert not second.HasField("batch_index")
    assert not request.HasField("request_id")


def test_ack_cumulative_with_receipt() -> None:
    request = sub(
        commands.ack(1, [MessageId(3, 4)], ack_type=AckType.Cumulative, request_id=6), T.ACK
    )
    assert request.ack_type == AckType.Cumulative
    assert request.request_id == 6


def test_ack_response() -> None:
    response = sub(commands.ack_response(1, 6), T.ACK_RESPONSE)
    assert (response.consumer_id, response.request_id) == (1, 6)
    assert not response.HasField("error")


def test_redeliver() -> None:
    everything = sub(
        commands.redeliver_unacknowledged_messages(3), T.REDELIVER_UNACKNOWLEDGED_MESSAGES
    )
    assert everything.consumer_id == 3
    assert not everything.message_ids
    some = sub(
        commands.redeliver_unacknowledged_messages(3, [MessageId(1, 2), MessageId(1, 3)]),
        T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
    )
    assert [(m.ledgerId, m.entryId) for m in some.message_ids] == [(1, 2), (1, 3)]


def test_seek() -> None:
    by_id = sub(commands.seek(1, 2, message_id=MessageId(4, 5)), T.SEEK)
    assert (by_id.message_id.ledgerId, by_id.message_id.entryId) == (4, 5)
    assert not by_id.HasField("message_publish_time")
    by_time = sub(commands.seek(1, 2, publish_time=1_700_000_000_000), T.SEEK)
    assert by_time.message_publish_time == 1_700_000_000_000
    assert not by_time.HasField("message_id")
    with pytest.raises(LocalProtocolError):
        commands.seek(1, 2)
    with pytest.raises(LocalProtocolError):
        commands.seek(1, 2, message_id=MessageId(1, 1), publish_time=1)


def test_unsubscribe_and_close_consumer() -> None:
    assert sub(commands.unsubscribe(1, 2), T.UNSUBSCRIBE).consumer_id == 1
    close = sub(commands.close_consumer(5), T.CLOSE_CONSUMER)
    assert (close.consumer_id, close.request_id) == (5, U64_MINUS_ONE)


def test_active_consumer_change() -> None:
    change = sub(commands.active_consumer_change(4, True), T.ACTIVE_CONSUMER_CHANGE)
    assert (change.consumer_id, change.is_active) == (4, True)


def test_reached_end_of_topic() -> None:
    assert sub(commands.reached_end_of_topic(4), T.REACHED_END_OF_TOPIC).consumer_id == 4


def test_get_last_message_id_and_response() -> None:
    assert sub(commands.get_last_message_id(1, 2), T.GET_LAST_MESSAGE_ID).request_id == 2
    response = sub(
        commands.get_last_message_id_response(2, MessageId(7, 9, batch_index=2), MessageId(7, 8)),
        T.GET_LAST_MESSAGE_ID_RESPONSE,
    )
    assert MessageId.from_pb(response.last_message_id) == MessageId(7, 9, batch_index=2)
    assert MessageId.from_pb(response.consumer_mark_delete_position) == MessageId(7, 8)
    empty = sub(
        commands.get_last_message_id_response(2, MessageId(-1, -1)),
        T.GET_LAST_MESSAGE_ID_RESPONSE,
    )
    assert empty.last_message_id.entryId == U64_MINUS_ONE
    assert not empty.HasField("consumer_mark_delete_position")


def test_consumer_stats_and_response() -> None:
    assert sub(commands.consumer_stats(3, 4), T.CONSUMER_STATS).consumer_id == 3
    response = sub(
        commands.consumer_stats_response(4, stats={"msgBacklog": 12, "consumerName": "c"}),
        T.CONSUMER_STATS_RESPONSE,
    )
    assert (response.msgBacklog, response.consumerName) == (12, "c")
    with pytest.raises(LocalProtocolError):
        commands.consumer_stats_response(4, stats={"noSuchField": 1})
