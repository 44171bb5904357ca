"""Builders of protocol.commands.producers: each one round-trips with the right fields."""

from __future__ import annotations

from protocol import commands
from protocol.enums import ProducerAccessMode
from protocol.errors import ServerError
from protocol.ids import MessageId
from tests.protocol.commands.frames import U64_MINUS_ONE, T, decode_one, entry, sub


def test_producer() -> None:
    request = sub(
        commands.producer(
            "persistent://public/default/t",
            1,
            2,
            producer_name="prod-a",
            metadata={"k": "v"},
            access_mode=ProducerAccessMode.WaitForExclusive,
            topic_epoch=3,
        ),
        T.PRODUCER,
    )
    assert (request.topic, request.producer_id, request.request_id) == (
        "persistent://public/default/t",
        1,
        2,
    )
    assert request.producer_name == "prod-a"
    assert request.user_provided_producer_name
    assert request.producer_access_mode == ProducerAccessMode.WaitForExclusive
    assert request.topic_epoch == 3
    assert {kv.key: kv.value for kv in request.metadata} == {"k": "v"}
    anonymous = sub(commands.producer("t", 1, 2), T.PRODUCER)
    assert not anonymous.HasField("producer_name")
    assert not anonymous.user_provided_producer_name
    assert not anonymous.HasField("topic_epoch")


def test_producer_success() -> None:
    response = sub(commands.producer_success(7, "gen-1"), T.PRODUCER_SUCCESS)
    assert (response.request_id, response.producer_name) == (7, "gen-1")
    assert response.last_sequence_id == -1
    assert response.producer_ready
    assert not response.HasField("schema_version")
    assert not response.HasField("topic_epoch")
    waiting = sub(
        commands.producer_success(7, "x", last_sequence_id=41, topic_epoch=2, producer_ready=False),
        T.PRODUCER_SUCCESS,
    )
    assert (waiting.last_sequence_id, waiting.topic_epoch, waiting.producer_ready) == (
        41,
        2,
        False,
    )


def test_send() -> None:
    frame = decode_one(commands.send(3, 10, entry(), num_messages=5, highest_sequence_id=14))
    send = frame.command.send
    assert (send.producer_id, send.sequence_id, send.num_messages) == (3, 10, 5)
    assert send.highest_sequence_id == 14
    assert frame.entry == entry()
    assert frame.checksum_valid
    single = decode_one(commands.send(3, 11, entry())).command.send
    assert not single.HasField("num_messages")
    assert not single.HasField("highest_sequence_id")


def test_send_receipt_leaves_partition_and_batch_index_out() -> None:
    receipt = sub(
        commands.send_receipt(1, 2, MessageId(5, 6, partition=3, batch_index=4)), T.SEND_RECEIPT
    )
    assert (receipt.producer_id, receipt.sequence_id) == (1, 2)
    assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (5, 6)
    assert not receipt.message_id.HasField("partition")
    assert not receipt.message_id.HasField("batch_index")
    assert not receipt.HasField("highest_sequence_id")


def test_send_receipt_for_duplicate_uses_uint64_minus_one() -> None:
    receipt = sub(commands.send_receipt(1, 2, MessageId(-1, -1), 2), T.SEND_RECEIPT)
    assert receipt.message_id.ledgerId == U64_MINUS_ONE
    assert receipt.message_id.entryId == U64_MINUS_ONE
    assert receipt.highest_sequence_id == 2


def test_send_error() -> None:
    error = sub(
        commands.send_error(1, 2, ServerError.ChecksumError, "Checksum failed on the broker"),
        T.SEND_ERROR,
    )
    assert (error.producer_id, error.sequence_id, error.error) == (1, 2, ServerError.ChecksumError)
    assert error.message == "Checksum failed on the broker"


def test_close_producer_from_broker_uses_minus_one() -> None:
    close = sub(commands.close_producer(4), T.CLOSE_PRODUCER)
    assert (close.producer_id, close.request_id) == (4, U64_MINUS_ONE)
    assert sub(commands.close_producer(4, 8), T.CLOSE_PRODUCER).request_id == 8


def test_topic_migrated() -> None:
    migrated = sub(
        commands.topic_migrated(2, is_consumer=True, broker_service_url="pulsar://x:1"),
        T.TOPIC_MIGRATED,
    )
    assert migrated.resource_type == migrated.Consumer
    assert migrated.brokerServiceUrl == "pulsar://x:1"
