"""Pure builders: one function per command, returning the encoded frame bytes.

Arguments follow the proto's semantics with Python spellings: ids and counters are ``int``;
signed 64-bit values that travel in ``uint64`` fields (``-1`` request ids, ledger ids) are
converted here, so callers never write ``2**64-1``; optional fields are left out when the
argument is ``None``. Enum arguments take the ``IntEnum``s of ``protocol.enums`` /
``protocol.errors`` (or their int values).

Rules every builder keeps (each one is a way to break the official client):

* every required field is set (the C++ client drops the connection on a frame it cannot parse);
* ``error``/``send_error`` always carry a message, even an empty one;
* ``send_receipt`` writes only ledgerId/entryId: the client fills partition and batch index;
* ``message`` relays the stored entry unchanged; metadata is never re-encoded.

Builders whose name is a broker reply are used by ``broker/``; the request builders
(``connect``, ``producer``, ``subscribe``, ...) by ``client/`` and by tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from protocol._pb import PulsarApi_pb2 as pb
from protocol.enums import AckType, InitialPosition, ProducerAccessMode, SubType, TopicListMode
from protocol.errors import LocalProtocolError, ServerError
from protocol.framing import encode_command, encode_payload_command
from protocol.ids import MessageId, from_u64, to_u64

#: Newest protocol version we speak (TOPIC_MIGRATED era, what the C++ 4.2.0 client sends).
PROTOCOL_VERSION = 20
#: Java broker default for CONNECTED.max_message_size.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: Request id of broker-initiated CLOSE_PRODUCER/CLOSE_CONSUMER (Java sends -1).
NO_REQUEST_ID = -1

T = pb.BaseCommand
# Hot builders (send, send_receipt, message) mask inline instead of calling to_u64: one call
# less per field is measurable at several hundred thousand frames per second.
U64_MASK = (1 << 64) - 1

AckIdentity = MessageId | tuple[MessageId, Sequence[int]]


def _add_key_values(target: object, values: Mapping[str, str] | None) -> None:
    if values:
        for key, value in values.items():
            target.add(key=key, value=value)  # type: ignore[attr-defined]


def _ack_set_words(words: Iterable[int]) -> list[int]:
    # ack_set is `repeated int64` holding Java BitSet words; accept unsigned 64-bit words too.
    return [from_u64(word & 0xFFFF_FFFF_FFFF_FFFF) for word in words]


def _entry_id(target: pb.MessageIdData, message_id: MessageId) -> None:
    target.ledgerId = message_id.ledger_id & U64_MASK
    target.entryId = message_id.entry_id & U64_MASK


# --- connection ----------------------------------------------------------------------------


def connect(
    client_version: str,
    *,
    protocol_version: int = PROTOCOL_VERSION,
    auth_method_name: str | None = None,
    auth_data: bytes | None = None,
    proxy_to_broker_url: str | None = None,
    supports_auth_refresh: bool = False,
    supports_broker_entry_metadata: bool = False,
    supports_partial_producer: bool = False,
    supports_topic_watchers: bool = False,
) -> bytes:
    """CONNECT: the first frame a client sends."""
    cmd = T(type=T.CONNECT)
    sub = cmd.connect
    sub.client_version = client_version
    sub.protocol_version = protocol_version
    if auth_method_name is not None:
        sub.auth_method_name = auth_method_name
    if auth_data is not None:
        sub.auth_data = auth_data
    if proxy_to_broker_url is not None:
        sub.proxy_to_broker_url = proxy_to_broker_url
    flags = sub.feature_flags
    flags.supports_auth_refresh = supports_auth_refresh
    flags.supports_broker_entry_metadata = supports_broker_entry_metadata
    flags.supports_partial_producer = supports_partial_producer
    flags.supports_topic_watchers = supports_topic_watchers
    return encode_command(cmd)


def connected(
    server_version: str,
    *,
    protocol_version: int = PROTOCOL_VERSION,
    max_message_size: int | None = DEFAULT_MAX_MESSAGE_SIZE,
) -> bytes:
    """CONNECTED: answer to CONNECT. Send ``min(client protocol_version, 20)``."""
    cmd = T(type=T.CONNECTED)
    sub = cmd.connected
    sub.server_version = server_version
    sub.protocol_version = protocol_version
    if max_message_size is not None:
        sub.max_message_size = max_message_size
    return encode_command(cmd)


def ping() -> bytes:
    """PING: keep-alive probe; the peer must answer PONG."""
    cmd = T(type=T.PING)
    cmd.ping.SetInParent()
    return encode_command(cmd)


def pong() -> bytes:
    """PONG: answer to PING."""
    cmd = T(type=T.PONG)
    cmd.pong.SetInParent()
    return encode_command(cmd)


def auth_challenge(
    server_version: str,
    auth_method_name: str,
    auth_data: bytes,
    *,
    protocol_version: int = PROTOCOL_VERSION,
) -> bytes:
    """AUTH_CHALLENGE: the broker asks for fresh credentials (an expired token)."""
    cmd = T(type=T.AUTH_CHALLENGE)
    sub = cmd.authChallenge
    sub.server_version = server_version
    sub.protocol_version = protocol_version
    sub.challenge.auth_method_name = auth_method_name
    sub.challenge.auth_data = auth_data
    return encode_command(cmd)


def auth_response(
    client_version: str,
    auth_method_name: str,
    auth_data: bytes,
    *,
    protocol_version: int = PROTOCOL_VERSION,
) -> bytes:
    """AUTH_RESPONSE: the client's answer to AUTH_CHALLENGE."""
    cmd = T(type=T.AUTH_RESPONSE)
    sub = cmd.authResponse
    sub.client_version = client_version
    sub.protocol_version = protocol_version
    sub.response.auth_method_name = auth_method_name
    sub.response.auth_data = auth_data
    return encode_command(cmd)


# --- generic replies -----------------------------------------------------------------------


def success(request_id: int, *, schema: pb.Schema | None = None) -> bytes:
    """SUCCESS for SUBSCRIBE, UNSUBSCRIBE, SEEK, CLOSE_PRODUCER and CLOSE_CONSUMER."""
    cmd = T(type=T.SUCCESS)
    sub = cmd.success
    sub.request_id = to_u64(request_id)
    if schema is not None:
        sub.schema.CopyFrom(schema)
    return encode_command(cmd)


def error(request_id: int, error: ServerError | int, message: str) -> bytes:
    """ERROR: failure of a request; ``message`` is required by the proto and always sent."""
    cmd = T(type=T.ERROR)
    sub = cmd.error
    sub.request_id = to_u64(request_id)
    sub.error = error  # type: ignore[assignment]
    sub.message = message
    return encode_command(cmd)


# --- lookup --------------------------------------------------------------------------------


def partitioned_metadata(topic: str, request_id: int) -> bytes:
    """PARTITIONED_METADATA request."""
    cmd = T(type=T.PARTITIONED_METADATA)
    sub = cmd.partitionMetadata
    sub.topic = topic
    sub.request_id = to_u64(request_id)
    return encode_command(cmd)


def partitioned_metadata_response(
    request_id: int,
    partitions: int = 0,
    *,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> bytes:
    """PARTITIONED_METADATA_RESPONSE: ``partitions`` (0 = not partitioned), or a failure."""
    cmd = T(type=T.PARTITIONED_METADATA_RESPONSE)
    sub = cmd.partitionMetadataResponse
    sub.request_id = to_u64(request_id)
    lookup_type = pb.CommandPartitionedTopicMetadataResponse
    if error is None:
        sub.response = lookup_type.Success
        sub.partitions = partitions
    else:
        sub.response = lookup_type.Failed
        sub.error = error  # type: ignore[assignment]
        sub.message = message or ""
    return encode_command(cmd)


def lookup(
    topic: str,
    request_id: int,
    *,
    authoritative: bool = False,
    advertised_listener_name: str | None = None,
) -> bytes:
    """LOOKUP request."""
    cmd = T(type=T.LOOKUP)
    sub = cmd.lookupTopic
    sub.topic = topic
    sub.request_id = to_u64(request_id)
    sub.authoritative = authoritative
    if advertised_listener_name is not None:
        sub.advertised_listener_name = advertised_listener_name
    return encode_command(cmd)


def lookup_response(
    request_id: int,
    broker_service_url: str | None = None,
    *,
    broker_service_url_tls: str | None = None,
    redirect: bool = False,
    authoritative: bool = True,
    proxy_through_service_url: bool = False,
    error: ServerError | int | None = None,
    message: str | None = None,
) -> bytes:
    """LOOKUP_RESPONSE: Connect (default), Redirect (``redirect=True``) or Failed (``error``).

    Raises:
        LocalProtocolError: neither a URL nor an error was given.
    """
    cmd = T(type=T.LOOKUP_RESPONSE)
    sub = cmd.lookupTopicResponse
    sub.request_id = to_u64(request_id)
    lookup_type = pb.CommandLookupTopicResponse
    if error is not None:
        sub.response = lookup_type.Failed
        sub.error = error  # type: ignore[assignment]
        sub.message = message or ""
        return encode_command(cmd)
    if broker_service_url is None and broker_service_url_tls is None:
        raise LocalProtocolError("a successful lookup response needs a broker URL")
    sub.response = lookup_type.Redirect if redirect else lookup_type.Connect
    if broker_service_url is not None:
        sub.brokerServiceUrl = broker_service_url
    if broker_service_url_tls is not None:
        sub.brokerServiceUrlTls = broker_service_url_tls
    sub.authoritative = authoritative
    sub.proxy_through_service_url = proxy_through_service_url
    return encode_command(cmd)


def get_topics_of_namespace(
    namespace: str,
    request_id: int,
    *,
    mode: TopicListMode | int = TopicListMode.PERSISTENT,
    topics_pattern: str | None = None,
    topics_hash: str | None = None,
) -> bytes:
    """GET_TOPICS_OF_NAMESPACE request (``namespace`` is ``tenant/ns``)."""
    cmd = T(type=T.GET_TOPICS_OF_NAMESPACE)
    sub = cmd.getTopicsOfNamespace
    sub.request_id = to_u64(request_id)
    sub.namespace = namespace
    sub.mode = mode  # type: ignore[assignment]
    if topics_pattern is not None:
        sub.topics_pattern = topics_pattern
    if topics_hash is not None:
        sub.topics_hash = topics_hash
    return encode_command(cmd)


def get_topics_of_namespace_response(
    request_id: int,
    topics: Iterable[str],
    *,
    filtered: bool = False,
    topics_hash: str | None = None,
    changed: bool = True,
) -> bytes:
    """GET_TOPICS_OF_NAMESPACE_RESPONSE: full topic names (the client filters unless told)."""
    cmd = T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    sub = cmd.getTopicsOfNamespaceResponse
    sub.request_id = to_u64(request_id)
    sub.topics.extend(topics)
    sub.filtered = filtered
    sub.changed = changed
    if topics_hash is not None:
        sub.topics_hash = topics_hash
    return encode_command(cmd)


# --- schema --------------------------------------------------------------------------------


def get_schema(topic: str, request_id: int, *, schema_version: bytes | None = None) -> bytes:
    """GET_SCHEMA request (absent ``schema_version`` = latest)."""
    cmd = T(type=T.GET_SCHEMA)
    sub = cmd.getSchema
    sub.request_id = to_u64(request_id)
    sub.topic = topic
    if schema_version is not None:
        sub.schema_version = schema_version
    return encode_command(cmd)


def get_schema_response(
    request_id: int,
    *,
    schema: pb.Schema | None = None,
    schema_version: bytes | None = None,
    error_code: ServerError | int | None = None,
    error_message: str | None = None,
) -> bytes:
    """GET_SCHEMA_RESPONSE: a schema, or ``error_code`` (e.g. TopicNotFound, no registry)."""
    cmd = T(type=T.GET_SCHEMA_RESPONSE)
    sub = cmd.getSchemaResponse
    sub.request_id = to_u64(request_id)
    if error_code is not None:
        sub.error_code = error_code  # type: ignore[assignment]
        sub.error_message = error_message or ""
    if schema is not None:
        sub.schema.CopyFrom(schema)
    if schema_version is not None:
        sub.schema_version = schema_version
    return encode_command(cmd)


def get_or_create_schema_response(
    request_id: int,
    *,
    schema_version: bytes | None = None,
    error_code: ServerError | int | None = None,
    error_message: str | None = None,
) -> bytes:
    """GET_OR_CREATE_SCHEMA_RESPONSE (the C++ 4.2.0 client never asks for it)."""
    cmd = T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
    sub = cmd.getOrCreateSchemaResponse
    sub.request_id = to_u64(request_id)
    if error_code is not None:
        sub.error_code = error_code  # type: ignore[assignment]
        sub.error_message = error_message or ""
    if schema_version is not None:
        sub.schema_version = schema_version
    return encode_command(cmd)


# --- producers -----------------------------------------------------------------------------


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
    _add_key_values(sub.metadata, metadata)
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


# --- consumers -----------------------------------------------------------------------------


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
    _add_key_values(sub.metadata, metadata)
    if read_compacted is not None:
        sub.read_compacted = read_compacted
    if schema is not None:
        sub.schema.CopyFrom(schema)
    sub.initialPosition = initial_position  # type: ignore[assignment]
    if key_shared_meta is not None:
        sub.keySharedMeta.CopyFrom(key_shared_meta)
    _add_key_values(sub.subscription_properties, subscription_properties)
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
