"""The blocking facade, for scripts, threads and Spark executors: ``Client``, ``Producer``,
``Consumer``, ``Reader`` and ``TableView`` over the asyncio client, in parts:

* ``client.sync.loop_thread``: the client's event loop on a thread of its own, fed in order;
* ``client.sync.runner``: how every facade reaches it, refused after ``close`` or
  ``os.fork()`` (a ``Client`` used in a child raises ``ClientUsedAfterFork``; the child creates
  its own, as Spark's forked workers do);
* ``client.sync.listener``: the official ``message_listener`` / ``reader_listener`` threads;
* one module per facade (``client``, ``producer``, ``consumer``, ``reader``, ``table_view``).

Its names are re-exported here, so ``from client.sync import Client`` keeps working.
"""

from client.sync.client import Client
from client.sync.consumer import Consumer
from client.sync.producer import Producer, SendCallback
from client.sync.reader import Reader
from client.sync.table_view import TableView

__all__ = ["Client", "Consumer", "Producer", "Reader", "SendCallback", "TableView"]
