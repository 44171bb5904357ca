"""Consumer commands: SUBSCRIBE, flow control, MESSAGE delivery, acknowledgements, SEEK and the
consumer's queries (last message id, statistics)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from protocol._accel import speedups
from protocol._pb import PulsarApi_pb2 as pb
from protocol.commands.fields import NO_REQUEST_ID, U64_MASK, T, add_key_values
from protocol.enums import AckType, InitialPosition, KeySharedMode, SubType
from protocol.errors import LocalProtocolError, ServerError
from protocol.framing import encode_command, encode_payload_command
from protocol.ids import MessageId, from_u64, to_u64

P = TypeVar("P")

AckIdentity = MessageId | tuple[MessageId, Sequence[int]]


def _ack_set_words(words: Iterable[int]) -> list[int]:
    # ack_set is `repeated int64` holding Java BitSet words; accept unsigned 64-bit words too.
    return [from_u64(word & 0xFFFF_FFFF_FFFF_FFFF) for word in words]


def _entry_id(target: pb.MessageIdData, message_id: MessageId) -> None:
    target.ledgerId = message_id.ledger_id & U64_MASK
    target.entryId = message_id.entry_id & U64_MASK


def key_shared_meta(
    mode: KeySharedMode | int = KeySharedMode.AUTO_SPLIT,
    hash_ranges: Iterable[tuple[int, int]] = (),
    *,
    allow_out_of_order_delivery: bool = False,
) -> pb.KeySharedMeta:
    """SUBSCRIBE's ``keySharedMeta``: the Key_Shared mode, the consumer's inclusive hash ranges
    (STICKY) and whether the broker may break per-key order when consumers come and go.

    ``allowOutOfOrderDelivery`` is always written, false included, as the C++ client does, so
    the bytes match the official client's.
    """
    meta = pb.KeySharedMeta(keySharedMode=int(mode))  # type: ignore[arg-type]
    for start, end in hash_ranges:
        meta.hashRanges.add(start=start, end=end)
    meta.allowOutOfOrderDelivery = allow_out_of_order_delivery
    return meta


def subscribe(
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    sub_type: SubType | int,
    *,
    consumer_name: str | None = None,
    priority_level: int | None = None,
    durable: bool = True,
    start_message_id: MessageId | None = None,
    metadata: Mapping[str, str] | None = None,
    read_compacted: bool | None = None,
    schema: pb.Schema | None = None,
    initial_position: InitialPosition | int = InitialPosition.Latest,
    key_shared_meta: pb.KeySharedMeta | None = None,
    subscription_properties: Mapping[str, str] | None = None,
) -> bytes:
    """SUBSCRIBE request; readers pass ``durable=False`` and a ``start_message_id``."""
    cmd = T(type=T.SUBSCRIBE)
    sub = cmd.subscribe
    sub.topic = topic
    sub.subscription = subscription
    sub.subType = sub_type  # type: ignore[assignment]
    sub.consumer_id = to_u64(consumer_id)
    sub.request_id = to_u64(request_id)
    if consumer_name is not None:
        sub.consumer_name = consumer_name
    if priority_level is not None:
        sub.priority_level = priority_level
    sub.durable = durable
    if start_message_id is not None:
        start_message_id.write_to(sub.start_message_id)
    add_key_values(sub.metadata, metadata)
    if read_compacted is not None:
        sub.read_compacted = read_compacted
    if schema is not None:
        sub.schema.CopyFrom(schema)
    sub.initialPosition = initial_position  # type: ignore[assignment]
    if key_shared_meta is not None:
        sub.keySharedMeta.CopyFrom(key_shared_meta)
    add_key_values(sub.subscription_properties, subscription_properties)
    return encode_command(cmd)


def flow(consumer_id: int, message_permits: int) -> bytes:
    """FLOW: grant ``message_permits`` more messages (not entries) to the consumer."""
    cmd = T(type=T.FLOW)
    sub = cmd.flow
    sub.consumer_id = to_u64(consumer_id)
    sub.messagePermits = message_permits
    return encode_command(cmd)


def message(
    consumer_id: int,
    message_id: MessageId,
    entry: bytes | memoryview,
    redelivery_count: int = 0,
    ack_set: Sequence[int] | None = None,
    *,
    consumer_epoch: int | None = None,
    checksum: bool = True,
) -> bytes:
    """MESSAGE: deliver the stored ``entry`` verbatim with a fresh CRC-32C.

    ``message_id`` should carry no partition for a non-partitioned topic. ``ack_set`` (PIP-54)
    is sent for partially acknowledged batches only: set bit i = index i still to deliver.
    """
    cmd = T(type=T.MESSAGE)
    sub = cmd.message
    sub.consumer_id = consumer_id & U64_MASK
    message_id.write_to(sub.message_id)
    if redelivery_count:
        sub.redelivery_count = redelivery_count
    if ack_set:
        sub.ack_set.extend(_ack_set_words(ack_set))
    if consumer_epoch is not None:
        sub.consumer_epoch = consumer_epoch
    return encode_payload_command(cmd, entry, checksum=checksum)


def ack(
    consumer_id: int,
    message_ids: Iterable[AckIdentity],
    *,
    ack_type: AckType | int = AckType.Individual,
    validation_error: int | None = None,
    properties: Mapping[str, int] | None = None,
    request_id: int | None = None,
) -> bytes:
    """ACK of entries; an item ``(MessageId, ack_set_words)`` acks part of a batch (PIP-54).

    Only ledgerId/entryId (and ack_set) are written per id, as the C++ client does.
    With ``request_id`` the broker answers ACK_RESPONSE.
    """
    cmd = T(type=T.ACK)
    sub = cmd.ack
    sub.consumer_id = to_u64(consumer_id)
    sub.ack_type = ack_type  # type: ignore[assignment]
    for item in message_ids:
        target = sub.message_id.add()
        if isinstance(item, MessageId):
            _entry_id(target, item)
        else:
            _entry_id(target, item[0])
            target.ack_set.extend(_ack_set_words(item[1]))
    if validation_error is not None:
        sub.validation_error = validation_error  # type: ignore[assignment]
    if properties:
        for key, value in properties.items():
            sub.properties.add(key=key, value=to_u64(value))
    if request_id is not None:
        sub.request_id = to_u64(request_id)
    return encode_command(cmd)


def py_ack_entries(consumer_id: int, entries: Sequence[tuple[int, int]]) -> bytes:
    """ACK (Individual) of whole entries given as ``(ledger id, entry id)``: the bytes ``ack``
    writes for those ids, without a ``MessageId`` per entry (a consumer's grouped
    acknowledgements, one per message received). The reference; ``ack_entries`` (end of the
    module) is the compiled one when built."""
    cmd = T(type=T.ACK)
    sub = cmd.ack
    sub.consumer_id = to_u64(consumer_id)
    sub.ack_type = AckType.Individual  # type: ignore[assignment]
    for ledger, entry in entries:
        target = sub.message_id.add()
        target.ledgerId = ledger & U64_MASK
        target.entryId = entry & U64_MASK
    return encode_command(cmd)


def py_acked_positions(
    ack: pb.CommandAck, position: Callable[[int, int], P]
) -> list[tuple[P, list[int] | None]]:
    """What a broker reads from a received ACK: per message id, ``position(ledger, entry)``
    (signed, as ids travel as uint64) and its PIP-54 ack set (None when it has none).

    ``position`` makes the broker's own position type, so a compiled version can build it
    directly instead of the broker wrapping every pair again."""
    return [
        (position(from_u64(m.ledgerId), from_u64(m.entryId)), list(m.ack_set) or None)
        for m in ack.message_id
    ]


def ack_response(
    consumer_id: int,
    request_id: int,
    *,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> bytes:
    """ACK_RESPONSE: only for an ACK that carried a request id."""
    cmd = T(type=T.ACK_RESPONSE)
    sub = cmd.ackResponse
    sub.consumer_id = to_u64(consumer_id)
    sub.request_id = to_u64(request_id)
    if error is not None:
        sub.error = error  # type: ignore[assignment]
        sub.message = message or ""
    return encode_command(cmd)


def redeliver_unacknowledged_messages(
    consumer_id: int,
    message_ids: Iterable[MessageId] = (),
    *,
    consumer_epoch: int | None = None,
) -> bytes:
    """REDELIVER_UNACKNOWLEDGED_MESSAGES: the given entries, or everything pending if none."""
    cmd = T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    sub = cmd.redeliverUnacknowledgedMessages
    sub.consumer_id = to_u64(consumer_id)
    for message_id in message_ids:
        _entry_id(sub.message_ids.add(), message_id)
    if consumer_epoch is not None:
        sub.consumer_epoch = consumer_epoch
    return encode_command(cmd)


def seek(
    consumer_id: int,
    request_id: int,
    *,
    message_id: MessageId | None = None,
    publish_time: int | None = None,
) -> bytes:
    """SEEK to an entry (inclusive) or to the first message published at/after a time (ms).

    Raises:
        LocalProtocolError: not exactly one of ``message_id`` and ``publish_time`` given.
    """
    if (message_id is None) == (publish_time is None):
        raise LocalProtocolError("seek needs exactly one of message_id and publish_time")
    cmd = T(type=T.SEEK)
    sub = cmd.seek
    sub.consumer_id = to_u64(consumer_id)
    sub.request_id = to_u64(request_id)
    if message_id is not None:
        _entry_id(sub.message_id, message_id)
    else:
        sub.message_publish_time = publish_time  # type: ignore[assignment]
    return encode_command(cmd)


def unsubscribe(consumer_id: int, request_id: int) -> bytes:
    """UNSUBSCRIBE request."""
    cmd = T(type=T.UNSUBSCRIBE)
    sub = cmd.unsubscribe
    sub.consumer_id = to_u64(consumer_id)
    sub.request_id = to_u64(request_id)
    return encode_command(cmd)


def close_consumer(consumer_id: int, request_id: int = NO_REQUEST_ID) -> bytes:
    """CLOSE_CONSUMER: a client request, or a broker notice (default request id -1)."""
    cmd = T(type=T.CLOSE_CONSUMER)
    sub = cmd.close_consumer
    sub.consumer_id = to_u64(consumer_id)
    sub.request_id = to_u64(request_id)
    return encode_command(cmd)


def active_consumer_change(consumer_id: int, is_active: bool) -> bytes:
    """ACTIVE_CONSUMER_CHANGE for Failover subscriptions."""
    cmd = T(type=T.ACTIVE_CONSUMER_CHANGE)
    sub = cmd.active_consumer_change
    sub.consumer_id = to_u64(consumer_id)
    sub.is_active = is_active
    return encode_command(cmd)


def reached_end_of_topic(consumer_id: int) -> bytes:
    """REACHED_END_OF_TOPIC. The C++ client (<= 4.2.0) does not know it and reconnects: see
    ``broker.connection.consumers.understands_reached_end_of_topic``."""
    cmd = T(type=T.REACHED_END_OF_TOPIC)
    cmd.reachedEndOfTopic.consumer_id = to_u64(consumer_id)
    return encode_command(cmd)


def get_last_message_id(consumer_id: int, request_id: int) -> bytes:
    """GET_LAST_MESSAGE_ID request."""
    cmd = T(type=T.GET_LAST_MESSAGE_ID)
    sub = cmd.getLastMessageId
    sub.consumer_id = to_u64(consumer_id)
    sub.request_id = to_u64(request_id)
    return encode_command(cmd)


def get_last_message_id_response(
    request_id: int,
    last_message_id: MessageId,
    consumer_mark_delete_position: MessageId | None = None,
) -> bytes:
    """GET_LAST_MESSAGE_ID_RESPONSE; an empty topic answers ``MessageId(-1, -1)``."""
    cmd = T(type=T.GET_LAST_MESSAGE_ID_RESPONSE)
    sub = cmd.getLastMessageIdResponse
    sub.request_id = to_u64(request_id)
    last_message_id.write_to(sub.last_message_id)
    if consumer_mark_delete_position is not None:
        consumer_mark_delete_position.write_to(sub.consumer_mark_delete_position)
    return encode_command(cmd)


def consumer_stats(consumer_id: int, request_id: int) -> bytes:
    """CONSUMER_STATS request."""
    cmd = T(type=T.CONSUMER_STATS)
    sub = cmd.consumerStats
    sub.consumer_id = to_u64(consumer_id)
    sub.request_id = to_u64(request_id)
    return encode_command(cmd)


def consumer_stats_response(
    request_id: int,
    *,
    error_code: ServerError | int | None = None,
    error_message: str | None = None,
    stats: Mapping[str, float | int | str | bool] | None = None,
) -> bytes:
    """CONSUMER_STATS_RESPONSE; ``stats`` uses the proto field names (``msgBacklog``, ...).

    Raises:
        LocalProtocolError: a key of ``stats`` is not a statistics field.
    """
    cmd = T(type=T.CONSUMER_STATS_RESPONSE)
    sub = cmd.consumerStatsResponse
    sub.request_id = to_u64(request_id)
    if error_code is not None:
        sub.error_code = error_code  # type: ignore[assignment]
        sub.error_message = error_message or ""
    for name, value in (stats or {}).items():
        if name in ("request_id", "error_code", "error_message"):
            raise LocalProtocolError(f"{name} is not a statistics field")
        try:
            setattr(sub, name, value)
        except (AttributeError, TypeError, ValueError) as exc:
            raise LocalProtocolError(f"bad consumer statistic {name}={value!r}") from exc
    return encode_command(cmd)


_speedups = speedups()
if TYPE_CHECKING:
    ack_entries = py_ack_entries
elif _speedups is not None:
    ack_entries = _speedups.bind_ack_entries(py_ack_entries)
else:
    ack_entries = py_ack_entries

if TYPE_CHECKING:
    acked_positions = py_acked_positions
elif _speedups is not None:
    acked_positions = _speedups.bind_acked_positions(py_acked_positions)
else:
    acked_positions = py_acked_positions
