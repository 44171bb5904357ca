"""What a consumer is configured with: the official ``subscribe`` and ``create_reader`` options,
and the checked ``ConsumerConfig`` each consumer of one topic (or partition) is built from.

``SubscribeOptions`` and ``ReaderOptions`` are the one definition of ``subscribe``'s and
``create_reader``'s parameters (names, order and defaults of the official ``pulsar.Client``):
``AsyncClient`` and the blocking ``Client`` both take exactly their fields, the blocking one
adding its listener after them (``client.signatures``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from client.dead_letter import ConsumerDeadLetterPolicy
from client.errors import InvalidConfiguration
from client.message import PayloadDecoder
from client.message_id import MessageId
from protocol import pb
from protocol.enums import InitialPosition, SubType, TopicListMode

__all__ = [
    "ConsumerConfig",
    "ConsumerType",
    "PayloadSchema",
    "ReaderOptions",
    "RegexSubscriptionMode",
    "SubscribeOptions",
    "consumer_config",
]

ConsumerType = SubType
"""The official ``pulsar.ConsumerType`` names: Exclusive, Shared, Failover, KeyShared."""

RegexSubscriptionMode = TopicListMode
"""The official ``pulsar.RegexSubscriptionMode`` names (PersistentOnly, NonPersistentOnly,
AllTopics): which topics a pattern subscription lists, as ``CommandGetTopicsOfNamespace.Mode``."""


class PayloadSchema(PayloadDecoder, Protocol):
    """What a consumer needs of a schema: decode, and its wire form for SUBSCRIBE."""

    def to_pb(self) -> pb.Schema | None: ...


@dataclass(frozen=True, slots=True)
class SubscribeOptions:
    """``subscribe``'s parameters, as the application gives them (enums as ints too).

    ``topic``: one topic; a list of topics, or a compiled ``re.Pattern`` of full topic names in
    one namespace (re-checked every ``pattern_auto_discovery_period`` seconds; which topics are
    listed: ``regex_subscription_mode``). ``dead_letter_policy``: see ``client.dead_letter``
    (Shared and Key_Shared only).
    """

    topic: str | list[str] | re.Pattern[str]
    subscription_name: str
    consumer_type: SubType | int = SubType.Exclusive
    schema: PayloadSchema | None = None
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int = 0
    negative_ack_redelivery_delay_ms: int = 60_000
    properties: Mapping[str, str] | None = None
    initial_position: InitialPosition | int = InitialPosition.Latest
    batch_index_ack_enabled: bool = False
    dead_letter_policy: ConsumerDeadLetterPolicy | None = None
    pattern_auto_discovery_period: float = 60
    is_read_compacted: bool = False
    regex_subscription_mode: RegexSubscriptionMode | int = RegexSubscriptionMode.PersistentOnly

    def consumer_config(self) -> ConsumerConfig:
        """The configuration of the consumer of each topic (or partition).

        Raises:
            InvalidConfiguration: a bad queue size or delay.
        """
        return ConsumerConfig(
            subscription_name=self.subscription_name,
            consumer_type=SubType(int(self.consumer_type)),
            initial_position=InitialPosition(int(self.initial_position)),
            receiver_queue_size=self.receiver_queue_size,
            consumer_name=self.consumer_name,
            properties=dict(self.properties or {}),
            schema=self.schema,
            batch_index_ack_enabled=self.batch_index_ack_enabled,
            negative_ack_redelivery_delay_ms=self.negative_ack_redelivery_delay_ms,
            unacked_messages_timeout_ms=self.unacked_messages_timeout_ms,
            read_compacted=self.is_read_compacted,
        )


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    """``create_reader``'s parameters: a reader from ``start_message_id``
    (``MessageId.earliest``/``latest`` or an id)."""

    topic: str
    start_message_id: MessageId
    reader_name: str | None = None
    schema: PayloadSchema | None = None
    receiver_queue_size: int = 1000
    start_message_id_inclusive: bool = False
    is_read_compacted: bool = False

    def consumer_config(self, subscription_name: str) -> ConsumerConfig:
        """The configuration of the reader's consumer on the non-durable ``subscription_name``.

        Raises:
            InvalidConfiguration: a bad queue size.
        """
        return ConsumerConfig(
            subscription_name=subscription_name,
            consumer_name=self.reader_name,
            receiver_queue_size=self.receiver_queue_size,
            schema=self.schema,
            durable=False,
            start_message_id=self.start_message_id,
            start_message_id_inclusive=self.start_message_id_inclusive,
            read_compacted=self.is_read_compacted,
        )


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """The checked options one consumer (or a reader's) is built with (the official names and
    defaults; enums as enums)."""

    subscription_name: str
    consumer_type: SubType = SubType.Exclusive
    initial_position: InitialPosition = InitialPosition.Latest
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    schema: PayloadSchema | None = None
    batch_index_ack_enabled: bool = False
    negative_ack_redelivery_delay_ms: int = 60_000
    unacked_messages_timeout_ms: int = 0
    durable: bool = True
    start_message_id: MessageId | None = None
    start_message_id_inclusive: bool = False
    #: The official ``is_read_compacted``: the compacted view, then the log after its horizon.
    read_compacted: bool = False

    def __post_init__(self) -> None:
        if self.receiver_queue_size < 1:
            raise InvalidConfiguration("receiver_queue_size must be >= 1")
        if self.unacked_messages_timeout_ms < 0 or self.negative_ack_redelivery_delay_ms < 0:
            raise InvalidConfiguration("redelivery delays must be >= 0")


def consumer_config(**options: Any) -> ConsumerConfig:
    """A ``ConsumerConfig`` from keyword options (enums accepted as ints)."""
    if "consumer_type" in options:
        options["consumer_type"] = SubType(int(options["consumer_type"]))
    if "initial_position" in options:
        options["initial_position"] = InitialPosition(int(options["initial_position"]))
    return ConsumerConfig(**options)
