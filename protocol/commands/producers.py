"""Producer commands: PRODUCER and its answer, SEND and its receipt or error, closing, migration."""

from __future__ import annotations

from collections.abc import Mapping

from protocol._pb import PulsarApi_pb2 as pb
from protocol.commands.fields import NO_REQUEST_ID, U64_MASK, T, add_key_values
from protocol.enums import ProducerAccessMode
from protocol.errors import ServerError
from protocol.framing import encode_command, encode_payload_command
from protocol.ids import MessageId, to_u64


def producer(
    topic: str,
    producer_id: int,
    request_id: int,
    *,
    producer_name: str | None = None,
    encrypted: bool = False,
    metadata: Mapping[str, str] | None = None,
    schema: pb.Schema | None = None,
    epoch: int = 0,
    access_mode: ProducerAccessMode | int = ProducerAccessMode.Shared,
    topic_epoch: int | None = None,
    initial_subscription_name: str | None = None,
) -> bytes:
    """PRODUCER request; without ``producer_name`` the broker generates one."""
    cmd = T(type=T.PRODUCER)
    sub = cmd.producer
    sub.topic = topic
    sub.producer_id = to_u64(producer_id)
    sub.request_id = to_u64(request_id)
    if producer_name is not None:
        sub.producer_name = producer_name
    sub.user_provided_producer_name = producer_name is not None
    sub.encrypted = encrypted
    add_key_values(sub.metadata, metadata)
    if schema is not None:
        sub.schema.CopyFrom(schema)
    sub.epoch = epoch
    sub.producer_access_mode = access_mode  # type: ignore[assignment]
    if topic_epoch is not None:
        sub.topic_epoch = topic_epoch
    if initial_subscription_name is not None:
        sub.initial_subscription_name = initial_subscription_name
    return encode_command(cmd)


def producer_success(
    request_id: int,
    producer_name: str,
    *,
    last_sequence_id: int = -1,
    schema_version: bytes | None = None,
    topic_epoch: int | None = None,
    producer_ready: bool = True,
) -> bytes:
    """PRODUCER_SUCCESS; ``producer_ready=False`` queues a WaitForExclusive producer."""
    cmd = T(type=T.PRODUCER_SUCCESS)
    sub = cmd.producer_success
    sub.request_id = to_u64(request_id)
    sub.producer_name = producer_name
    sub.last_sequence_id = last_sequence_id
    if schema_version is not None:
        sub.schema_version = schema_version
    if topic_epoch is not None:
        sub.topic_epoch = topic_epoch
    sub.producer_ready = producer_ready
    return encode_command(cmd)


def send(
    producer_id: int,
    sequence_id: int,
    entry: bytes | memoryview,
    *,
    num_messages: int | None = None,
    highest_sequence_id: int | None = None,
    is_chunk: bool = False,
    marker: bool = False,
    checksum: bool = True,
) -> bytes:
    """SEND: ``entry`` is ``[metadataSize][metadata][payload]`` (see ``metadata.encode_entry``).

    ``num_messages`` is set for batches, as the C++ client does.
    """
    cmd = T(type=T.SEND)
    sub = cmd.send
    sub.producer_id = producer_id & U64_MASK
    sub.sequence_id = sequence_id & U64_MASK
    if num_messages is not None:
        sub.num_messages = num_messages
    if highest_sequence_id is not None:
        sub.highest_sequence_id = to_u64(highest_sequence_id)
    if is_chunk:
        sub.is_chunk = True
    if marker:
        sub.marker = True
    return encode_payload_command(cmd, entry, checksum=checksum)


def send_receipt(
    producer_id: int,
    sequence_id: int,
    message_id: MessageId,
    highest_sequence_id: int | None = None,
) -> bytes:
    """SEND_RECEIPT; only ledgerId/entryId of ``message_id`` are written.

    A duplicate (PIP-6) is acknowledged with ``MessageId(-1, -1)``.
    """
    cmd = T(type=T.SEND_RECEIPT)
    sub = cmd.send_receipt
    sub.producer_id = producer_id & U64_MASK
    sub.sequence_id = sequence_id & U64_MASK
    target = sub.message_id
    target.ledgerId = message_id.ledger_id & U64_MASK
    target.entryId = message_id.entry_id & U64_MASK
    if highest_sequence_id is not None:
        sub.highest_sequence_id = to_u64(highest_sequence_id)
    return encode_command(cmd)


def send_error(producer_id: int, sequence_id: int, error: ServerError | int, message: str) -> bytes:
    """SEND_ERROR. The C++ client handles only ChecksumError; others drop the connection."""
    cmd = T(type=T.SEND_ERROR)
    sub = cmd.send_error
    sub.producer_id = to_u64(producer_id)
    sub.sequence_id = to_u64(sequence_id)
    sub.error = error  # type: ignore[assignment]
    sub.message = message
    return encode_command(cmd)


def close_producer(producer_id: int, request_id: int = NO_REQUEST_ID) -> bytes:
    """CLOSE_PRODUCER: a client request, or a broker notice (default request id -1)."""
    cmd = T(type=T.CLOSE_PRODUCER)
    sub = cmd.close_producer
    sub.producer_id = to_u64(producer_id)
    sub.request_id = to_u64(request_id)
    return encode_command(cmd)


def topic_migrated(
    resource_id: int,
    *,
    is_consumer: bool,
    broker_service_url: str | None = None,
    broker_service_url_tls: str | None = None,
) -> bytes:
    """TOPIC_MIGRATED (blue-green migration; not used by Magnetar)."""
    cmd = T(type=T.TOPIC_MIGRATED)
    sub = cmd.topicMigrated
    sub.resource_id = to_u64(resource_id)
    resource = pb.CommandTopicMigrated
    sub.resource_type = resource.Consumer if is_consumer else resource.Producer
    if broker_service_url is not None:
        sub.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        sub.brokerServiceUrlTls = broker_service_url_tls
    return encode_command(cmd)
