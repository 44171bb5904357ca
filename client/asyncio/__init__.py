"""``client.asyncio``: the official ``pulsar.asyncio`` API over our asyncio-native client.

An application written for ``pulsar.asyncio`` changes its import only::

    from client.asyncio import Client, PulsarException

    client = Client("pulsar://localhost:6650")
    producer = await client.create_producer("my-topic")  # batching on, as the official one
    message_id = await producer.send(b"hello")
    consumer = await client.subscribe("my-topic", "my-sub")
    message = await consumer.receive()
    await consumer.acknowledge(message)
    await client.close()

The same names, parameters (order and defaults), coroutine/plain split and errors as
``pulsar.asyncio`` (every error a ``PulsarException`` whose ``error()`` is a ``client.Result``);
``tests/client/asyncio/test_surface.py`` compares the signatures with the official module's.
``client.AsyncClient`` remains the fuller asyncio API (timeouts on ``receive``, ``send_async``,
iteration); this package is the port target.

Modules: ``client`` (``Client``, option mapping), ``producer``, ``consumer``, ``reader``,
``errors`` (``PulsarException`` and the translation of ours), ``lifecycle`` (close/shutdown
state shared by a client's handles), ``enums`` (``BatchingType``, which our client lacked).
"""

from client.asyncio.client import Client
from client.asyncio.consumer import Consumer
from client.asyncio.errors import PulsarException
from client.asyncio.producer import Producer
from client.asyncio.reader import Reader
from client.batching import BatchingType
from client.consumer import RegexSubscriptionMode
from client.consumer.policies import ConsumerCryptoFailureAction
from client.routing import PartitionsRoutingMode
from protocol.enums import CompressionType, InitialPosition, ProducerAccessMode

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerCryptoFailureAction",
    "InitialPosition",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
]
