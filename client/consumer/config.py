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

from client.arguments import check_number, check_type, check_type_or_none
from client.chunking import DEFAULT_MAX_PENDING_CHUNKED_MESSAGE
from client.consumer.batch_receive import (
    DEFAULT_BATCH_RECEIVE_POLICY,
    BatchReceivePolicy,
    ConsumerBatchReceivePolicy,
)
from client.consumer.policies import ConsumerCryptoFailureAction, ConsumerType
from client.crypto import CryptoKeyReader
from client.dead_letter import ConsumerDeadLetterPolicy
from client.errors import InvalidConfiguration
from client.key_shared import ConsumerKeySharedPolicy, key_shared_meta_for
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

RegexSubscriptionMode = TopicListMode
"""The official ``pulsar.RegexSubscriptionMode`` names (PersistentOnly, NonPersistentOnly,
AllTopics): which topics a pattern subscription lists, as ``CommandGetTopicsOfNamespace.Mode``."""


class PayloadSchema(PayloadDecoder, Protocol):
    """What a consumer needs of a schema: decode, and its wire form for SUBSCRIBE."""

    def to_pb(self) -> pb.Schema | None: ...


@dataclass(frozen=True, slots=True)
class SubscribeOptions:
    """``subscribe``'s parameters, as the application gives them (enums as ints too), in the
    official order (the blocking client adds ``message_listener`` after ``schema``).

    ``topic``: one topic; a list of topics, or a compiled ``re.Pattern`` of full topic names in
    one namespace (re-checked every ``pattern_auto_discovery_period`` seconds; which topics are
    listed: ``regex_subscription_mode``). ``dead_letter_policy``: see ``client.dead_letter``
    (Shared and Key_Shared only). ``batch_receive_policy``: what ``batch_receive()`` waits for.
    ``receiver_queue_size`` 0: a zero-queue consumer (one FLOW permit per ``receive``).
    ``max_total_receiver_queue_size_across_partitions``, ``broker_consumer_stats_cache_time_ms``,
    and ``replicate_subscription_state_enabled`` are accepted and ignored (no
    geo-replication). ``crypto_key_reader`` decrypts end-to-end encrypted messages;
    ``crypto_failure_action`` says what becomes of one that cannot be decrypted
    (``client.consumer.entries``).

    Raises:
        ValueError: an argument of the wrong type (the official checks and message).
    """

    topic: str | list[str] | re.Pattern[str]
    subscription_name: str
    consumer_type: ConsumerType | SubType | int = ConsumerType.Exclusive
    schema: PayloadSchema | None = None
    receiver_queue_size: int = 1000
    max_total_receiver_queue_size_across_partitions: int = 50_000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    broker_consumer_stats_cache_time_ms: int = 30_000
    negative_ack_redelivery_delay_ms: int = 60_000
    is_read_compacted: bool = False
    properties: Mapping[str, str] | None = None
    pattern_auto_discovery_period: float = 60
    initial_position: InitialPosition | int = InitialPosition.Latest
    crypto_key_reader: CryptoKeyReader | None = None
    replicate_subscription_state_enabled: bool = False
    max_pending_chunked_message: int = DEFAULT_MAX_PENDING_CHUNKED_MESSAGE
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    start_message_id_inclusive: bool = False
    batch_receive_policy: ConsumerBatchReceivePolicy | None = None
    key_shared_policy: ConsumerKeySharedPolicy | None = None
    batch_index_ack_enabled: bool = False
    regex_subscription_mode: RegexSubscriptionMode | int = RegexSubscriptionMode.PersistentOnly
    dead_letter_policy: ConsumerDeadLetterPolicy | None = None
    crypto_failure_action: ConsumerCryptoFailureAction | int = ConsumerCryptoFailureAction.FAIL

    def __post_init__(self) -> None:
        # The official checks, in its order; the topic's last, as there.
        check_type(str, self.subscription_name, "subscription_name")
        check_type(int, self.consumer_type, "consumer_type")
        check_type(int, self.receiver_queue_size, "receiver_queue_size")
        check_type(
            int,
            self.max_total_receiver_queue_size_across_partitions,
            "max_total_receiver_queue_size_across_partitions",
        )
        check_type_or_none(str, self.consumer_name, "consumer_name")
        check_number(self.unacked_messages_timeout_ms, "unacked_messages_timeout_ms", optional=True)
        check_number(self.negative_ack_redelivery_delay_ms, "negative_ack_redelivery_delay_ms")
        check_number(self.pattern_auto_discovery_period, "pattern_auto_discovery_period")
        check_type(bool, self.is_read_compacted, "is_read_compacted")
        check_type_or_none(Mapping, self.properties, "properties")
        check_type(int, self.initial_position, "initial_position")
        check_type(int, self.max_pending_chunked_message, "max_pending_chunked_message")
        check_type(
            bool,
            self.auto_ack_oldest_chunked_message_on_queue_full,
            "auto_ack_oldest_chunked_message_on_queue_full",
        )
        check_type(bool, self.start_message_id_inclusive, "start_message_id_inclusive")
        check_type_or_none(
            ConsumerBatchReceivePolicy, self.batch_receive_policy, "batch_receive_policy"
        )
        check_type_or_none(ConsumerKeySharedPolicy, self.key_shared_policy, "key_shared_policy")
        check_type(bool, self.batch_index_ack_enabled, "batch_index_ack_enabled")
        check_type(
            int, self.broker_consumer_stats_cache_time_ms, "broker_consumer_stats_cache_time_ms"
        )
        check_type(int, self.regex_subscription_mode, "regex_subscription_mode")
        check_type_or_none(ConsumerDeadLetterPolicy, self.dead_letter_policy, "dead_letter_policy")
        check_type(int, self.crypto_failure_action, "crypto_failure_action")
        check_type_or_none(CryptoKeyReader, self.crypto_key_reader, "crypto_key_reader")
        if not isinstance(self.topic, (str, list, re.Pattern)):
            raise ValueError(
                "Argument 'topic' is expected to be of a type between (str, list, re.pattern)"
            )

    def consumer_config(self) -> ConsumerConfig:
        """The configuration of the consumer of each topic (or partition).

        Raises:
            InvalidConfiguration: a bad queue size or delay.
        """
        policy = self.batch_receive_policy
        return ConsumerConfig(
            subscription_name=self.subscription_name,
            consumer_type=SubType(int(self.consumer_type)),
            initial_position=InitialPosition(int(self.initial_position)),
            receiver_queue_size=self.receiver_queue_size,
            consumer_name=self.consumer_name,
            properties=dict(self.properties or {}),
            schema=self.schema,
            batch_index_ack_enabled=self.batch_index_ack_enabled,
            negative_ack_redelivery_delay_ms=int(self.negative_ack_redelivery_delay_ms),
            unacked_messages_timeout_ms=int(self.unacked_messages_timeout_ms or 0),
            read_compacted=self.is_read_compacted,
            start_message_id_inclusive=self.start_message_id_inclusive,
            batch_receive_policy=(
                DEFAULT_BATCH_RECEIVE_POLICY if policy is None else policy.policy()
            ),
            max_pending_chunked_message=self.max_pending_chunked_message,
            auto_ack_oldest_chunked_message_on_queue_full=(
                self.auto_ack_oldest_chunked_message_on_queue_full
            ),
            key_shared_policy=self.key_shared_policy,
            crypto_key_reader=self.crypto_key_reader,
            crypto_failure_action=ConsumerCryptoFailureAction(int(self.crypto_failure_action)),
        )


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    """``create_reader``'s parameters, in the official order (the blocking client adds
    ``reader_listener`` after ``schema``): a reader from ``start_message_id``
    (``MessageId.earliest``/``latest`` or an id). ``subscription_role_prefix`` names the
    reader's subscription; ``crypto_key_reader`` and ``crypto_failure_action`` as
    ``subscribe``'s.

    Raises:
        ValueError: an argument of the wrong type (the official checks and message).
    """

    topic: str
    start_message_id: MessageId
    schema: PayloadSchema | None = None
    receiver_queue_size: int = 1000
    reader_name: str | None = None
    subscription_role_prefix: str | None = None
    is_read_compacted: bool = False
    crypto_key_reader: CryptoKeyReader | None = None
    start_message_id_inclusive: bool = False
    crypto_failure_action: ConsumerCryptoFailureAction | int = ConsumerCryptoFailureAction.FAIL

    def __post_init__(self) -> None:
        check_type(str, self.topic, "topic")
        check_type(MessageId, self.start_message_id, "start_message_id")
        check_type(int, self.receiver_queue_size, "receiver_queue_size")
        check_type_or_none(str, self.reader_name, "reader_name")
        check_type_or_none(str, self.subscription_role_prefix, "subscription_role_prefix")
        check_type(bool, self.is_read_compacted, "is_read_compacted")
        check_type(bool, self.start_message_id_inclusive, "start_message_id_inclusive")
        check_type(int, self.crypto_failure_action, "crypto_failure_action")
        check_type_or_none(CryptoKeyReader, self.crypto_key_reader, "crypto_key_reader")

    def consumer_config(self, subscription_name: str) -> ConsumerConfig:
        """The configuration of the reader's consumer on the non-durable ``subscription_name``
        (behind ``subscription_role_prefix`` when given).

        Raises:
            InvalidConfiguration: a bad queue size.
        """
        if self.subscription_role_prefix:
            subscription_name = f"{self.subscription_role_prefix}-{subscription_name}"
        return ConsumerConfig(
            subscription_name=subscription_name,
            consumer_name=self.reader_name,
            receiver_queue_size=self.receiver_queue_size,
            schema=self.schema,
            durable=False,
            start_message_id=self.start_message_id,
            start_message_id_inclusive=self.start_message_id_inclusive,
            read_compacted=self.is_read_compacted,
            crypto_key_reader=self.crypto_key_reader,
            crypto_failure_action=ConsumerCryptoFailureAction(int(self.crypto_failure_action)),
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
    batch_receive_policy: BatchReceivePolicy = DEFAULT_BATCH_RECEIVE_POLICY
    max_pending_chunked_message: int = DEFAULT_MAX_PENDING_CHUNKED_MESSAGE
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    #: Key_Shared only: sent as SUBSCRIBE's ``keySharedMeta`` (None: AutoSplit, in order).
    key_shared_policy: ConsumerKeySharedPolicy | None = None
    #: Decrypts end-to-end encrypted entries (None: they are handled by the failure action).
    crypto_key_reader: CryptoKeyReader | None = None
    crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL

    def __post_init__(self) -> None:
        if self.receiver_queue_size < 0:
            raise InvalidConfiguration("receiver_queue_size must be >= 0 (0: a zero queue)")
        if self.unacked_messages_timeout_ms < 0 or self.negative_ack_redelivery_delay_ms < 0:
            raise InvalidConfiguration("redelivery delays must be >= 0")

    def key_shared_meta(self) -> pb.KeySharedMeta | None:
        """SUBSCRIBE's ``keySharedMeta``: Key_Shared consumers only (``client.key_shared``)."""
        return key_shared_meta_for(self.consumer_type, self.key_shared_policy)


def consumer_config(**options: Any) -> ConsumerConfig:
    """A ``ConsumerConfig`` from keyword options (enums accepted as ints)."""
    if "consumer_type" in options:
        options["consumer_type"] = SubType(int(options["consumer_type"]))
    if "initial_position" in options:
        options["initial_position"] = InitialPosition(int(options["initial_position"]))
    return ConsumerConfig(**options)
