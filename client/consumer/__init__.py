"""The asyncio consumer of one topic (and a reader's core), in parts:

* ``client.consumer.config``: the official ``subscribe`` / ``create_reader`` options and the
  checked ``ConsumerConfig`` a consumer is built from;
* ``client.consumer.receiver_queue``: queued messages, FLOW permits, the blocking hand-off;
* ``client.consumer.entries``: MESSAGE frames to messages (codecs, batches, chunks, corrupt
  entries, a reader's start);
* ``client.consumer.ack_grouping``: acknowledgements grouped into ACK commands;
* ``client.consumer.redelivery``: negative acknowledgements and the unacked timeout;
* ``client.consumer.async_consumer``: ``AsyncConsumer``, which subscribes (again after a lost
  connection), acknowledges, seeks and closes.

Its names are re-exported here, so ``from client.consumer import AsyncConsumer`` keeps working.
"""

from client.consumer.async_consumer import AsyncConsumer, ConsumerHost
from client.consumer.config import (
    ConsumerConfig,
    ConsumerType,
    PayloadSchema,
    ReaderOptions,
    RegexSubscriptionMode,
    SubscribeOptions,
    consumer_config,
)

__all__ = [
    "AsyncConsumer",
    "ConsumerConfig",
    "ConsumerHost",
    "ConsumerType",
    "PayloadSchema",
    "ReaderOptions",
    "RegexSubscriptionMode",
    "SubscribeOptions",
    "consumer_config",
]
