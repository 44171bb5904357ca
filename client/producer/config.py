"""What a producer is configured with: the official ``create_producer`` options, and the
checked ``ProducerConfig`` each producer of one topic (or partition) is built from.

``ProducerOptions`` is the one definition of ``create_producer``'s parameters (names, order and
defaults of the official ``pulsar.Client.create_producer``): ``AsyncClient.create_producer`` and
the blocking ``Client.create_producer`` both take exactly its fields (``client.signatures``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from client.arguments import check_number, check_type, check_type_or_none
from client.batching import (
    DEFAULT_BATCHING_MAX_ALLOWED_SIZE_IN_BYTES,
    DEFAULT_BATCHING_MAX_MESSAGES,
    DEFAULT_BATCHING_MAX_PUBLISH_DELAY_MS,
    BatchingType,
)
from client.crypto import CryptoKeyReader
from client.errors import InvalidConfiguration
from client.routing import MessageRouter, PartitionsRoutingMode
from protocol import pb
from protocol.enums import CompressionType, ProducerAccessMode

__all__ = ["PayloadEncoder", "ProducerConfig", "ProducerOptions"]


class PayloadEncoder(Protocol):
    """What the producer needs of a schema (``client.schema``)."""

    def encode(self, value: Any) -> bytes: ...

    def to_pb(self) -> pb.Schema | None: ...


@dataclass(frozen=True, slots=True)
class ProducerOptions:
    """``create_producer``'s parameters, as the application gives them (enums as ints too).

    A partitioned topic is routed by ``message_routing_mode`` / ``message_router`` (see
    ``client.routing``). ``lazy_start_partitioned_producers`` is accepted and ignored (every
    partition's producer starts at once); ``batching_type=BatchingType.KeyBased`` batches by key
    (``client.key_based_batching``);
    ``encryption_key`` with ``crypto_key_reader`` encrypts every entry end to end
    (``client.producer.encryption``); as in the official client, either one alone encrypts
    nothing.
    """

    topic: str
    producer_name: str | None = None
    schema: PayloadEncoder | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30_000
    compression_type: CompressionType | int = CompressionType.NONE
    max_pending_messages: int = 1000
    max_pending_messages_across_partitions: int = 50_000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = DEFAULT_BATCHING_MAX_MESSAGES
    batching_max_allowed_size_in_bytes: int = DEFAULT_BATCHING_MAX_ALLOWED_SIZE_IN_BYTES
    batching_max_publish_delay_ms: int = DEFAULT_BATCHING_MAX_PUBLISH_DELAY_MS
    chunking_enabled: bool = False
    message_routing_mode: PartitionsRoutingMode | int = PartitionsRoutingMode.RoundRobinDistribution
    lazy_start_partitioned_producers: bool = False
    properties: Mapping[str, str] | None = None
    batching_type: BatchingType | int = BatchingType.Default
    encryption_key: str | None = None
    crypto_key_reader: CryptoKeyReader | None = None
    access_mode: ProducerAccessMode | int = ProducerAccessMode.Shared
    message_router: MessageRouter | None = None

    def __post_init__(self) -> None:
        """Raises:
        ValueError: an argument of the wrong type (the official checks and message).
        """
        check_type(str, self.topic, "topic")
        check_type_or_none(str, self.producer_name, "producer_name")
        check_type_or_none(int, self.initial_sequence_id, "initial_sequence_id")
        check_number(self.send_timeout_millis, "send_timeout_millis")
        check_type(int, self.compression_type, "compression_type")
        for name in (
            "max_pending_messages",
            "max_pending_messages_across_partitions",
            "batching_max_messages",
            "batching_max_allowed_size_in_bytes",
        ):
            check_type(int, getattr(self, name), name)
        check_number(self.batching_max_publish_delay_ms, "batching_max_publish_delay_ms")
        for name in (
            "block_if_queue_full",
            "batching_enabled",
            "chunking_enabled",
            "lazy_start_partitioned_producers",
        ):
            check_type(bool, getattr(self, name), name)
        check_type_or_none(Mapping, self.properties, "properties")
        check_type(int, self.batching_type, "batching_type")
        check_type_or_none(str, self.encryption_key, "encryption_key")
        check_type_or_none(CryptoKeyReader, self.crypto_key_reader, "crypto_key_reader")
        check_type(int, self.access_mode, "access_mode")
        if self.batching_enabled and self.chunking_enabled:
            raise ValueError("Batching and chunking of messages can't be enabled together.")

    def producer_config(self) -> ProducerConfig:
        """The configuration of the producer of each partition (or of the topic).

        Raises:
            InvalidConfiguration: options that do not go together.
        """
        return ProducerConfig(
            producer_name=self.producer_name,
            initial_sequence_id=self.initial_sequence_id,
            send_timeout_millis=self.send_timeout_millis,
            access_mode=ProducerAccessMode(int(self.access_mode)),
            max_pending_messages=self.max_pending_messages,
            block_if_queue_full=self.block_if_queue_full,
            properties=dict(self.properties or {}),
            batching_enabled=self.batching_enabled,
            batching_max_messages=self.batching_max_messages,
            batching_max_allowed_size_in_bytes=self.batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=self.batching_max_publish_delay_ms,
            compression_type=CompressionType(int(self.compression_type)),
            chunking_enabled=self.chunking_enabled,
            schema=self.schema,
            batching_type=BatchingType(int(self.batching_type)),
            # The C++ ProducerConfiguration encrypts only with both a key name and a reader.
            encryption_keys=(
                (self.encryption_key,)
                if self.encryption_key and self.crypto_key_reader is not None
                else ()
            ),
            crypto_key_reader=self.crypto_key_reader,
        )


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """The checked ``create_producer`` options one producer is built with (the official names
    and defaults; enums as enums)."""

    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30_000
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    max_pending_messages: int = 1000
    block_if_queue_full: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    batching_enabled: bool = False
    batching_max_messages: int = DEFAULT_BATCHING_MAX_MESSAGES
    batching_max_allowed_size_in_bytes: int = DEFAULT_BATCHING_MAX_ALLOWED_SIZE_IN_BYTES
    batching_max_publish_delay_ms: int = DEFAULT_BATCHING_MAX_PUBLISH_DELAY_MS
    compression_type: CompressionType = CompressionType.NONE
    chunking_enabled: bool = False
    schema: PayloadEncoder | None = None
    batching_type: BatchingType = BatchingType.Default
    #: The names of the public keys each entry's data key is encrypted with (none: plain).
    encryption_keys: tuple[str, ...] = ()
    crypto_key_reader: CryptoKeyReader | None = None

    def __post_init__(self) -> None:
        if self.batching_enabled and self.chunking_enabled:
            raise InvalidConfiguration("batching and chunking cannot be enabled together")
        if self.send_timeout_millis < 0:
            raise InvalidConfiguration("send_timeout_millis must be >= 0 (0: never time out)")
        if self.encryption_keys and self.crypto_key_reader is None:
            raise InvalidConfiguration("encryption_keys need a crypto_key_reader")
