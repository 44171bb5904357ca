"""What a producer builds its entries with: the ``EntryContext`` and the accumulator for its
configuration (one message alone, default or key-based batches, encryption around them).

Both the per-message path (``client.accumulator``) and the bulk path (``client.producer.bulk``)
take the producer's id, confirmed name, codec, schema version and the broker's size limit from
one ``EntryContext``, made here.
"""

from __future__ import annotations

from collections.abc import Callable

from client.accumulator import Accumulator, BatchAccumulator, EntryContext, SingleAccumulator
from client.batching import BatchBuilder, BatchingType
from client.crypto import MessageEncryptor
from client.key_based_batching import KeyBasedAccumulator
from client.producer.config import ProducerConfig
from client.producer.encryption import EncryptingAccumulator, encryption_overhead
from protocol.enums import CompressionType

__all__ = ["entry_context", "new_accumulator"]


def entry_context(
    config: ProducerConfig,
    producer_id: int,
    producer_name: str,
    schema_version: bytes | None,
    max_message_size: Callable[[], int],
) -> EntryContext:
    """The context of a producer's entries; ``max_message_size`` reads the current
    connection's limit (it changes with the connection)."""
    limit = max_message_size
    if config.encryption_keys:
        # Entries grow when encrypted: chunks are cut smaller so that they still fit.
        overhead = encryption_overhead(config.encryption_keys)

        def limit() -> int:
            return max_message_size() - overhead

    return EntryContext(
        producer_id=producer_id,
        producer_name=producer_name,
        codec=CompressionType(int(config.compression_type)),
        schema_version=schema_version,
        max_message_size=limit,
    )


def new_accumulator(
    config: ProducerConfig, context: EntryContext, encryptor: MessageEncryptor | None
) -> Accumulator:
    """The accumulator of a producer with ``config``, encrypting when ``encryptor`` is set."""
    inner = _plain_accumulator(config, context)
    return inner if encryptor is None else EncryptingAccumulator(inner, encryptor)


def _plain_accumulator(config: ProducerConfig, context: EntryContext) -> Accumulator:
    if not config.batching_enabled:
        return SingleAccumulator(context, chunking=config.chunking_enabled)
    if config.batching_type == BatchingType.KeyBased:
        return KeyBasedAccumulator(
            context,
            max_messages=config.batching_max_messages,
            max_bytes=config.batching_max_allowed_size_in_bytes,
            max_publish_delay_ms=config.batching_max_publish_delay_ms,
        )
    builder = BatchBuilder(
        max_messages=config.batching_max_messages,
        max_bytes=config.batching_max_allowed_size_in_bytes,
        max_publish_delay_ms=config.batching_max_publish_delay_ms,
    )
    return BatchAccumulator(context, builder)
