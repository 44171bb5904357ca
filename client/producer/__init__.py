"""The asyncio producer of one topic, in three parts:

* ``client.producer.config``: the official ``create_producer`` options (``ProducerOptions``)
  and the checked ``ProducerConfig`` a producer is built from;
* ``client.producer.send_api``: the ``send`` / ``send_async`` arguments, checked into a message
  (``prepare_send``), shared with the partitioned producer and the blocking facade;
* ``client.producer.async_producer``: ``AsyncProducer``, the effectively-once recipe (pending
  sends, reconnection, resend in order, timeouts, closing).

Its names are re-exported here, so ``from client.producer import AsyncProducer`` keeps working.
"""

from client.producer.async_producer import AsyncProducer, ProducerHost
from client.producer.config import PayloadEncoder, ProducerConfig, ProducerOptions
from client.producer.send_api import (
    IDEMPOTENCY_KEY_PROPERTY,
    SendApi,
    prepare_message,
    prepare_send,
)

__all__ = [
    "IDEMPOTENCY_KEY_PROPERTY",
    "AsyncProducer",
    "PayloadEncoder",
    "ProducerConfig",
    "ProducerHost",
    "ProducerOptions",
    "SendApi",
    "prepare_message",
    "prepare_send",
]
