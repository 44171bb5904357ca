"""Sans-I/O codec for the Apache Pulsar binary protocol.

This package contains no networking code at all: bytes go in through ``FrameDecoder.feed`` and
come out as ``Frame`` objects; the builders in ``protocol.commands`` turn arguments into frame
bytes. The connection modules of the broker and client own the sockets.

Imports allowed here: the standard library, ``crc32c`` and the generated ``protocol._pb``.
"""

from protocol import commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.batch import SingleMessage, decode_batch, encode_batch, split_batch
from protocol.checksum import crc32c
from protocol.enums import (
    AckType,
    AckValidationError,
    CompressionType,
    InitialPosition,
    KeySharedMode,
    ProducerAccessMode,
    SubType,
    TopicListMode,
)
from protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError, ServerError
from protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    Frame,
    FrameDecoder,
    encode_command,
    encode_payload_command,
)
from protocol.ids import MessageId
from protocol.metadata import (
    EntryMetadata,
    decode_entry,
    decode_entry_plain,
    decode_plain_entry_lazily,
    encode_entry,
    parse_entry_metadata,
)
from protocol.topic_name import InvalidTopicNameError, TopicName

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "AckType",
    "AckValidationError",
    "CompressionType",
    "EntryMetadata",
    "Frame",
    "FrameDecoder",
    "InitialPosition",
    "InvalidTopicNameError",
    "KeySharedMode",
    "LocalProtocolError",
    "MessageId",
    "ProducerAccessMode",
    "ProtocolError",
    "RemoteProtocolError",
    "ServerError",
    "SingleMessage",
    "SubType",
    "TopicListMode",
    "TopicName",
    "commands",
    "crc32c",
    "decode_batch",
    "decode_entry",
    "decode_entry_plain",
    "decode_plain_entry_lazily",
    "encode_batch",
    "encode_command",
    "encode_entry",
    "encode_payload_command",
    "parse_entry_metadata",
    "pb",
    "split_batch",
]
