"""What the planner asks a partition without pulling its backlog: the last message id, the
message at or after an id, the first message published at or after a time.

A ``Probe`` is a reader with a queue of one message (``receiver_queue_size=1``: the broker
sends one message ahead, never the backlog; a zero queue cannot time out, and a read must),
kept open across micro-batches and moved with ``seek``. Each answer costs a round trip and a
message or two: the planner's micro-batch ends are computed from message ids (``budget``), so
the payloads travel once, to the executors.
"""

from __future__ import annotations

import logging

from client.message_id import MessageId
from client.sync import Client, Reader
from spark_connector.positions import Position

__all__ = ["Probe"]

logger = logging.getLogger(__name__)


class Probe:
    """One partition topic's one-message reader (opened on first use)."""

    def __init__(self, client: Client, topic: str, poll_timeout_ms: int) -> None:
        self._client = client
        self.topic = topic
        self._poll_timeout_ms = poll_timeout_ms
        self._reader: Reader | None = None

    def _open(self) -> Reader:
        if self._reader is None:
            self._reader = self._client.create_reader(
                self.topic,
                MessageId.earliest,
                receiver_queue_size=1,
                start_message_id_inclusive=True,
            )
        return self._reader

    def last_message_id(self) -> MessageId:
        """GET_LAST_MESSAGE_ID (entry id -1 when the partition is empty)."""
        return self._open().get_last_message_id()

    def _read_from(self, target: MessageId | int) -> tuple[Position, int]:
        """``(position, publish time)`` of the first message at or after ``target`` (an id,
        inclusive, or a publish time); the caller knows one exists."""
        reader = self._open()
        reader.seek(target)
        message = reader.read_next(self._poll_timeout_ms)
        mid = message.message_id()
        position = Position.of_message(mid.ledger_id(), mid.entry_id(), mid.batch_index())
        return position, message.publish_timestamp()

    def first_from(self, position: Position) -> Position:
        """The first message at or after ``position``'s entry (``EARLIEST``: the oldest one
        kept). Only call it when the partition has a message there (its last id is beyond)."""
        target = (
            MessageId.earliest
            if position.is_earliest
            else MessageId(-1, position.ledger, position.entry, -1)
        )
        return self._read_from(target)[0]

    def at_time(self, millis: int) -> Position | None:
        """The first message published at or after ``millis``; None when there is none."""
        last = self.last_message_id()
        if last.entry_id() < 0:
            return None
        _, newest = self._read_from(MessageId(-1, last.ledger_id(), last.entry_id(), -1))
        if newest < millis:
            return None
        return self._read_from(millis)[0]

    def close(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            try:
                reader.close()
            except Exception:
                logger.debug("closing a probe of %s failed", self.topic, exc_info=True)
