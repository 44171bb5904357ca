"""The durable cursor a streaming query keeps on each partition it reads.

Subscription ``spark-<rid>`` (or the ``subscriptionName`` option), Exclusive, created in
``initialOffset`` at the starting position so retention keeps everything the query still needs
while it is stopped. The source moves it to every offset known done: ``commit(end)`` (after Spark
logged batch N as committed) and ``latestOffset(start)`` (Spark plans batch N+1 only after batch
N committed; its ``commit`` call for a run's last batch comes late, or never when a restart finds
nothing new). Moving it means:

* a cumulative acknowledgement of the entry *before* ``end``'s entry, so the entry a restart
  resumes at is never trimmed (the cursor lags by at most one entry; harmless, Spark re-reads
  from its own checkpoint, never from the cursor);
* when ``end`` is inside a batch and the entry's size is known, a PIP-54 batch-index
  acknowledgement of the indexes below ``end``'s index, so the backlog counts messages exactly.

Acknowledgements are confirmed by a round trip (``Consumer.get_last_message_id``): Spark may
kill the planning process right after. Failures are logged, never raised: the cursor only bounds
retention, and a query must not fail because it could not move it (pulsar-spark #30). ``stop()``
is never called by Spark, so the subscription outlives a deleted query: remove it with the admin
API (``magnetar-admin topics unsubscribe``).
"""

from __future__ import annotations

import logging
import time

from client.errors import ConsumerBusy
from client.message_id import MessageId
from client.sync import Client, Consumer
from protocol.enums import InitialPosition, SubType
from spark_connector.positions import Position

__all__ = ["DurableCursor", "cursor_target"]

logger = logging.getLogger(__name__)

_BUSY_RETRY_SECONDS = 10.0


def cursor_target(
    end: Position, batch_size: int | None
) -> tuple[MessageId | None, MessageId | None]:
    """What to acknowledge for ``end``: ``(cumulative entry id, batch-index id)``, each optional.

    Pure. ``batch_size``: messages in ``end``'s entry when known.
    """
    if end.is_earliest:
        return None, None
    cumulative = MessageId(-1, end.ledger, end.entry - 1) if end.entry > 0 else None
    inside = batch_size is not None and batch_size > 1 and 0 < end.batch < batch_size
    batch = (
        MessageId(-1, end.ledger, end.entry, end.batch - 1, batch_size=batch_size or 0)
        if inside
        else None
    )
    return cumulative, batch


class DurableCursor:
    """The subscription of one query on one topic (opened on first use)."""

    def __init__(self, client: Client, topic: str, subscription: str) -> None:
        self._client = client
        self.topic = topic
        self.subscription = subscription
        self._consumer: Consumer | None = None

    def _open(self) -> Consumer:
        if self._consumer is None:
            deadline = time.monotonic() + _BUSY_RETRY_SECONDS
            while True:
                try:
                    self._consumer = self._client.subscribe(
                        self.topic,
                        self.subscription,
                        consumer_type=SubType.Exclusive,
                        receiver_queue_size=1,
                        initial_position=InitialPosition.Earliest,
                        batch_index_ack_enabled=True,
                    )
                    break
                except ConsumerBusy:
                    # The previous run's planner process may not be gone yet.
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        return self._consumer

    def ensure(self) -> None:
        """Create the subscription if needed (it then holds retention from the earliest)."""
        try:
            self._open()
        except Exception:
            logger.warning(
                "cannot open cursor %s on %s", self.subscription, self.topic, exc_info=True
            )

    def move_to(self, end: Position, batch_size: int | None) -> None:
        """Acknowledge what precedes ``end`` (see the module docstring); never raises."""
        cumulative, batch = cursor_target(end, batch_size)
        try:
            consumer = self._open()
            if cumulative is not None:
                consumer.acknowledge_cumulative(cumulative)
            if batch is not None:
                consumer.acknowledge_cumulative(batch)
            # Answered after the acknowledgements: once it returns the broker has them.
            consumer.get_last_message_id()
        except Exception:
            logger.warning(
                "cannot move cursor %s on %s to %s",
                self.subscription,
                self.topic,
                end,
                exc_info=True,
            )
