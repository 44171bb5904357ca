"""Builders of protocol.commands: each one round-trips through the decoder with the right fields.

Also: every BaseCommand type (2..68) survives encode -> decode, builder or not.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from protocol import commands, pb
from protocol.enums import AckType, InitialPosition, ProducerAccessMode, SubType, TopicListMode
from protocol.errors import LocalProtocolError, ServerError
from protocol.framing import (
    SUB_MESSAGE_NAME,
    Frame,
    FrameDecoder,
    encode_command,
    encode_payload_command,
)
from protocol.ids import MessageId
from protocol.metadata import encode_entry

T = pb.BaseCommand
U64_MINUS_ONE = 2**64 - 1


def decode_one(data: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.feed(data)
    frames = list(decoder)
    assert len(frames) == 1
    assert decoder.buffered == 0
    return frames[0]


def sub(data: bytes, expected_type: int) -> Any:
    """Decode one frame of ``expected_type`` and return its sub-command (typed loosely)."""
    frame = decode_one(data)
    assert frame.type == expected_type
    return getattr(frame.command, SUB_MESSAGE_NAME[expected_type])


def entry() -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=5)
    return encode_entry(metadata, b"body")


# --- every type, generically ---------------------------------------------------------------


def _fill_required(message: Message) -> None:
    for field in message.DESCRIPTOR.fields:
        if not field.is_required:
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            _fill_required(getattr(message, field.name))
        elif field.type == FieldDescriptor.TYPE_ENUM:
            assert field.enum_type is not None
            setattr(message, field.name, field.enum_type.values[-1].number)
        elif field.type == FieldDescriptor.TYPE_STRING:
            setattr(message, field.name, f"{field.name}-value")
        elif field.type == FieldDescriptor.TYPE_BYTES:
            setattr(message, field.name, b"\x00\xff")
        elif field.type == FieldDescriptor.TYPE_BOOL:
            setattr(message, field.name, True)
        else:
            setattr(message, field.name, field.number + 40)


@pytest.mark.parametrize("command_type", sorted(T.Type.values()))
def test_every_command_type_round_trips(command_type: int) -> None:
    command = pb.BaseCommand(type=command_type)  # type: ignore[arg-type]
    inner = getattr(command, SUB_MESSAGE_NAME[command_type])
    inner.SetInParent()
    _fill_required(inner)
    if command_type in (T.SEND, T.MESSAGE):
        data = encode_payload_command(command, entry())
    else:
        data = encode_command(command)
    frame = decode_one(data)
    assert frame.type == command_type
    assert frame.command == command


def test_types_cover_2_to_68() -> None:
    values = set(T.Type.values())
    assert min(values) == 2
    assert max(values) == 68
    assert values == set(range(2, 41)) | set(range(50, 69))


# --- connection ----------------------------------------------------------------------------


def test_connect() -> None:
    connect = sub(
        commands.connect(
            "Magnetar-client", auth_method_name="none", supports_broker_entry_metadata=True
        ),
        T.CONNECT,
    )
    assert connect.client_version == "Magnetar-client"
    assert connect.protocol_version == 20
    assert connect.auth_method_name == "none"
    assert connect.feature_flags.supports_broker_entry_metadata
    assert not connect.feature_flags.supports_topic_watchers
    assert not connect.HasField("proxy_to_broker_url")


def test_connected() -> None:
    connected = sub(commands.connected("Magnetar 0.1", protocol_version=15), T.CONNECTED)
    assert connected.server_version == "Magnetar 0.1"
    assert connected.protocol_version == 15
    assert connected.max_message_size == 5 * 1024 * 1024
    bare = sub(commands.connected("x", max_message_size=None), T.CONNECTED)
    assert not bare.HasField("max_message_size")


def test_ping_pong_carry_their_sub_message() -> None:
    assert decode_one(commands.ping()).command.HasField("ping")
    assert decode_one(commands.pong()).command.HasField("pong")


def test_auth_challenge() -> None:
    challenge = sub(commands.auth_challenge("srv", "none", b"\x01"), T.AUTH_CHALLENGE)
    assert challenge.challenge.auth_method_name == "none"
    assert challenge.challenge.auth_data == b"\x01"


# --- replies -------------------------------------------------------------------------------


def test_success() -> None:
    assert sub(commands.success(12), T.SUCCESS).request_id == 12
    schema = pb.Schema(name="s", schema_data=b"{}", type=pb.Schema.Json)
    assert sub(commands.success(1, schema=schema), T.SUCCESS).schema == schema


@pytest.mark.parametrize("code", list(ServerError))
def test_error_every_server_error(code: ServerError) -> None:
    error = sub(commands.error(3, code, f"failed: {code.name}"), T.ERROR)
    assert error.request_id == 3
    assert ServerError(error.error) is code
    assert error.message == f"failed: {code.name}"


def test_error_with_empty_message_still_sets_it() -> None:
    error = sub(commands.error(3, ServerError.UnknownError, ""), T.ERROR)
    assert error.HasField("message")


def test_partitioned_metadata() -> None:
    request = sub(commands.partitioned_metadata("persistent://a/b/c", 1), T.PARTITIONED_METADATA)
    assert (request.topic, request.request_id) == ("persistent://a/b/c", 1)


def test_partitioned_metadata_response() -> None:
    ok = sub(commands.partitioned_metadata_response(2, 4), T.PARTITIONED_METADATA_RESPONSE)
    assert (ok.request_id, ok.partitions, ok.response) == (2, 4, ok.Success)
    zero = sub(commands.partitioned_metadata_response(2), T.PARTITIONED_METADATA_RESPONSE)
    assert zero.HasField("partitions")
    assert zero.partitions == 0
    failed = sub(
        commands.partitioned_metadata_response(
            2, error=ServerError.TopicNotFound, message="no such namespace"
        ),
        T.PARTITIONED_METADATA_RESPONSE,
    )
    assert failed.response == failed.Failed
    assert failed.error == ServerError.TopicNotFound
    assert failed.message == "no such namespace"


def test_lookup() -> None:
    request = sub(commands.lookup("persistent://a/b/c", 9), T.LOOKUP)
    assert (request.topic, request.request_id, request.authoritative) == (
        "persistent://a/b/c",
        9,
        False,
    )
    listener = sub(commands.lookup("t", 1, advertised_listener_name="int"), T.LOOKUP)
    assert listener.advertised_listener_name == "int"


def test_lookup_response_connect() -> None:
    response = sub(
        commands.lookup_response(4, "pulsar://localhost:6650", proxy_through_service_url=True),
        T.LOOKUP_RESPONSE,
    )
    assert response.response == response.Connect
    assert response.brokerServiceUrl == "pulsar://localhost:6650"
    assert response.authoritative
    assert response.proxy_through_service_url
    assert response.request_id == 4


def test_lookup_response_redirect_and_failure() -> None:
    redirect = sub(commands.lookup_response(1, "pulsar://b:1", redirect=True), T.LOOKUP_RESPONSE)
    assert redirect.response == redirect.Redirect
    failed = sub(
        commands.lookup_response(1, error=ServerError.ServiceNotReady, message="no listener"),
        T.LOOKUP_RESPONSE,
    )
    assert failed.response == failed.Failed
    assert failed.error == ServerError.ServiceNotReady
    assert failed.message == "no listener"
    with pytest.raises(LocalProtocolError):
        commands.lookup_response(1)


def test_get_topics_of_namespace() -> None:
    request = sub(
        commands.get_topics_of_namespace("public/default", 3, mode=TopicListMode.ALL),
        T.GET_TOPICS_OF_NAMESPACE,
    )
    assert (request.namespace, request.request_id, request.mode) == ("public/default", 3, 2)
    response = sub(
        commands.get_topics_of_namespace_response(3, ["persistent://public/default/a"]),
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
    )
    assert list(response.topics) == ["persistent://public/default/a"]
    assert not response.filtered
    assert response.changed


def test_get_schema_and_response() -> None:
    request = sub(commands.get_schema("t", 5, schema_version=b"\x00" * 8), T.GET_SCHEMA)
    assert (request.topic, request.request_id, request.schema_version) == ("t", 5, b"\x00" * 8)
    missing = sub(
        commands.get_schema_response(
            5, error_code=ServerError.TopicNotFound, error_message="no schema"
        ),
        T.GET_SCHEMA_RESPONSE,
    )
    assert missing.error_code == ServerError.TopicNotFound
    assert missing.error_message == "no schema"
    schema = pb.Schema(name="s", schema_data=b"x", type=pb.Schema.String)
    found = sub(
        commands.get_schema_response(5, schema=schema, schema_version=b"\x01"),
        T.GET_SCHEMA_RESPONSE,
    )
    assert found.schema == schema
    assert not found.HasField("error_code")


def test_get_or_create_schema_response() -> None:
    response = sub(
        commands.get_or_create_schema_response(2, schema_version=b"\x07"),
        T.GET_OR_CREATE_SCHEMA_RESPONSE,
    )
    assert response.schema_version == b"\x07"


# --- producers -----------------------------------------------------------------------------


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


# --- consumers -----------------------------------------------------------------------------


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
