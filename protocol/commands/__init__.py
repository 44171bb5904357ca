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

The builders live by concept (``connection``, ``replies``, ``discovery``, ``schemas``,
``producers``, ``consumers``; what they share in ``fields``); callers use them all from here,
as ``commands.<builder>(...)``.
"""

from protocol.commands.connection import (
    PROTOCOL_VERSION,
    auth_challenge,
    auth_response,
    connect,
    connected,
    ping,
    pong,
)
from protocol.commands.consumers import (
    AckIdentity,
    ack,
    ack_entries,
    ack_response,
    active_consumer_change,
    close_consumer,
    consumer_stats,
    consumer_stats_response,
    flow,
    get_last_message_id,
    get_last_message_id_response,
    message,
    reached_end_of_topic,
    redeliver_unacknowledged_messages,
    seek,
    subscribe,
    unsubscribe,
)
from protocol.commands.discovery import (
    get_topics_of_namespace,
    get_topics_of_namespace_response,
    lookup,
    lookup_response,
    partitioned_metadata,
    partitioned_metadata_response,
)
from protocol.commands.fields import NO_REQUEST_ID, U64_MASK, T
from protocol.commands.producers import (
    close_producer,
    producer,
    producer_success,
    send,
    send_error,
    send_receipt,
    topic_migrated,
)
from protocol.commands.replies import error, success
from protocol.commands.schemas import (
    get_or_create_schema_response,
    get_schema,
    get_schema_response,
)
from protocol.enums import DEFAULT_MAX_MESSAGE_SIZE, ProducerAccessMode
from protocol.framing import encode_command

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "NO_REQUEST_ID",
    "PROTOCOL_VERSION",
    "U64_MASK",
    "AckIdentity",
    "ProducerAccessMode",
    "T",
    "ack",
    "ack_entries",
    "ack_response",
    "active_consumer_change",
    "auth_challenge",
    "auth_response",
    "close_consumer",
    "close_producer",
    "connect",
    "connected",
    "consumer_stats",
    "consumer_stats_response",
    "encode_command",
    "error",
    "flow",
    "get_last_message_id",
    "get_last_message_id_response",
    "get_or_create_schema_response",
    "get_schema",
    "get_schema_response",
    "get_topics_of_namespace",
    "get_topics_of_namespace_response",
    "lookup",
    "lookup_response",
    "message",
    "partitioned_metadata",
    "partitioned_metadata_response",
    "ping",
    "pong",
    "producer",
    "producer_success",
    "reached_end_of_topic",
    "redeliver_unacknowledged_messages",
    "seek",
    "send",
    "send_error",
    "send_receipt",
    "subscribe",
    "success",
    "topic_migrated",
    "unsubscribe",
]
