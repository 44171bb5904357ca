"""What a consumer tells the broker about the messages it handed out, as the C++ client does.

* **Acknowledge** one message: its entry; one message of a batch: the entry once every index
  the broker delivered is acknowledged (``client.acks``), or at once with an ack set when
  ``batch_index_ack_enabled`` (PIP-54); a chunked message: every chunk's entry.
* **Acknowledge cumulatively** up to a message (not on Shared/Key_Shared); inside a batch
  without batch-index acks, up to the previous entry.
* **Negative acknowledgements and the unacked timeout** make entries due for redelivery
  (``client.consumer.redelivery``). Due entries are asked for again by id on Shared/Key_Shared,
  or published to the dead-letter topic when on their last delivery (``client.dead_letter``);
  Exclusive/Failover redeliver everything unacknowledged (the broker rewinds).

Everything goes out through the consumer's ``AckGrouper``, in the order it was made.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Protocol

from client.acks import BatchAcks, EntryKey, ack_set_words, entry_key, wire_entry
from client.consumer.ack_grouping import AckGrouper
from client.consumer.config import ConsumerConfig
from client.consumer.entries import EntryDecoder
from client.consumer.redelivery import RedeliveryTimers
from client.dead_letter import DeadLetterSender
from client.errors import CumulativeAcknowledgementNotAllowedError
from client.message import Message
from client.message_id import UNKNOWN_CLUSTER, MessageId, cluster_of
from protocol import commands
from protocol.commands import AckIdentity
from protocol.enums import AckType, SubType
from protocol.ids import MessageId as WireMessageId

__all__ = ["Acknowledger", "AcknowledgingConsumer", "id_of", "tracks_handouts"]

logger = logging.getLogger(__name__)

_SHARED_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})
# A redelivery request names at most this many entries.
_REDELIVER_AT_ONCE = 1000


def id_of(message: Message | MessageId) -> MessageId:
    """The id to acknowledge for ``message``.

    Raises:
        TypeError: neither a Message nor a MessageId (as the official).
    """
    if isinstance(message, Message):
        return message.message_id()
    if isinstance(message, MessageId):
        return message
    raise TypeError(f"expected a Message or MessageId, not {type(message).__name__}")


def tracks_handouts(config: ConsumerConfig, dead_letter: DeadLetterSender | None) -> bool:
    """Whether handing a message out must be recorded (``Acknowledger.handed_out``): for the
    dead-letter policy, or the unacked timeout of a durable subscription."""
    return dead_letter is not None or (config.unacked_messages_timeout_ms > 0 and config.durable)


class AcknowledgingConsumer(Protocol):
    """What the acknowledger asks of its consumer (``AsyncConsumer``)."""

    def is_connected(self) -> bool: ...

    def is_receiving(self) -> bool: ...

    def acknowledge(self, message: Message | MessageId) -> None: ...

    def redeliver_unacknowledged_messages(self) -> None: ...


class Acknowledger:
    """Acknowledgements and redelivery requests of one consumer (see the module docstring)."""

    def __init__(
        self,
        consumer: AcknowledgingConsumer,
        consumer_id: int,
        config: ConsumerConfig,
        acks: AckGrouper,
        batches: BatchAcks,
        entries: EntryDecoder,
        dead_letter: DeadLetterSender | None,
    ) -> None:
        self._consumer = consumer
        self._consumer_id = consumer_id
        self._config = config
        self._shared = config.consumer_type in _SHARED_TYPES
        self._acks = acks
        self._batches = batches
        self._entries = entries
        self._dead_letter = dead_letter
        self._loop = asyncio.get_running_loop()
        self.redelivery = RedeliveryTimers(self._loop, self._on_due)
        self._cluster: str | None = None  # ``Connection.cluster`` of the last subscription

    def moved_to(self, cluster: str) -> str | None:
        """The cluster left, when a subscription on a connection of ``cluster`` is on another
        cluster than the last one (the client switched, ``client.service_info``); else None.
        The acknowledgements not sent yet and the bookkeeping of the old cluster's messages are
        then dropped: their ids name the old cluster's entries, and sent to the new one they
        would acknowledge unrelated messages (the one at the same position, never delivered);
        a message of the old cluster acknowledged later is dropped too (``_left``)."""
        previous, self._cluster = self._cluster, cluster
        if previous is None or previous == cluster:
            return None
        dropped = len(self._acks.take())
        self._batches.clear()
        self.redelivery.clear()
        logger.warning(
            "%s: on another cluster now: %d acknowledgements of the old one dropped",
            self._consumer,
            dropped,
        )
        return previous

    def handed_out(self, message: Message, message_id: MessageId) -> None:
        """``message`` reached the application (called when ``tracks_handouts``)."""
        if self._dead_letter is not None:
            self._dead_letter.handed_out(entry_key(message_id), message)
        if self._config.unacked_messages_timeout_ms > 0 and self._config.durable:
            due = self._loop.time() + self._config.unacked_messages_timeout_ms / 1000
            self.redelivery.track_unacked(entry_key(message_id), due)

    def _left(self, cluster: str | None) -> bool:
        """Whether a message received in ``cluster`` came from a cluster the client has left
        since: its acknowledgement is dropped (``moved_to``)."""
        return cluster != self._cluster and cluster is not UNKNOWN_CLUSTER

    def acknowledge_message(self, message: Message) -> None:
        """``acknowledge(message.message_id())``, without making the id of a message of a
        batch (the consumer's hot path)."""
        key, batch_index, batch_size, cluster = message.ack_position()
        if cluster != self._cluster and self._left(cluster):
            return
        if batch_index >= 0 and batch_size > 0:
            self._acknowledge_in_batch(key, batch_index, batch_size)
        elif batch_size < 0:  # reassembled from chunks: its id knows them
            self.acknowledge(message.message_id())
        else:  # a whole entry: no id needed
            self._acks.add_entry(key)
            self.redelivery.forget(key)  # ``_untrack``, inline: once per message
            if self._dead_letter is not None:
                self._dead_letter.forget(key)

    def acknowledge(self, message_id: MessageId) -> None:
        if self._left(cluster_of(message_id)):
            return
        ledger, entry_id, batch_index, batch_size = message_id.position()
        key = (ledger, entry_id)
        if batch_index >= 0 and batch_size > 0:  # one message of a batch (PIP-54)
            self._acknowledge_in_batch(key, batch_index, batch_size)
            return
        first_chunk = message_id.first_chunk()
        if first_chunk is not None:
            chunks = self._entries.take_chunk_ids(key, (first_chunk, message_id.wire))
            for chunk in chunks:
                self._acks.add_entry(entry_key(chunk))
            self._untrack(key)
            return
        self._acks.add_entry(key)
        self._untrack(key)

    def _acknowledge_in_batch(self, key: EntryKey, batch_index: int, batch_size: int) -> None:
        """One message of a batch (PIP-54): the entry is acknowledged once all of them are."""
        unacked = self._batches.ack(key, batch_index, batch_size)
        if self._dead_letter is not None:
            self._dead_letter.forget_message(key, batch_index)
        if unacked:
            if self._config.batch_index_ack_enabled:
                self._acks.add((wire_entry(key), ack_set_words(unacked, batch_size)))
            return
        self._acks.add_entry(key)
        self._untrack(key)

    def acknowledge_queued(self, pending: deque[Message | MessageId]) -> None:
        """Acknowledge everything in ``pending``, emptied from the left (a blocking consumer's
        window of acknowledgements, which its thread may still be appending to).

        One call for the window: without a dead-letter policy or batch-index acks, a message
        of a batch whose entry is not done yet costs a set update here and nothing more.
        """
        simple = self._dead_letter is None and not self._config.batch_index_ack_enabled
        batch_ack = self._batches.ack
        here = self._cluster
        popleft = pending.popleft
        # Whole entries done, in order: handed to the grouper at once, before anything else
        # acknowledges (``_settle_done``), so the order of acknowledgements is kept.
        done: list[EntryKey] = []
        while pending:
            item = popleft()
            if simple and item.__class__ is Message:
                key, batch_index, batch_size, cluster = item.ack_position()
                if cluster != here and self._left(cluster):
                    continue
                if batch_index >= 0 and batch_size > 0:
                    if not batch_ack(key, batch_index, batch_size):
                        done.append(key)  # the last of its batch: the entry is done
                    continue
                if batch_size == 0:  # a whole entry (``acknowledge_message``'s last case)
                    done.append(key)
                    continue
            self._settle_done(done)
            if item.__class__ is Message:
                self.acknowledge_message(item)
            else:
                self.acknowledge(id_of(item))
        self._settle_done(done)

    def _settle_done(self, keys: list[EntryKey]) -> None:
        """Acknowledge the whole entries ``keys`` (emptied)."""
        if keys:
            self._acks.add_entries(keys)
            self.redelivery.forget_all(keys)
            keys.clear()

    def acknowledge_cumulative(self, message_id: MessageId) -> None:
        """Raises:
        CumulativeAcknowledgementNotAllowedError: a Shared or Key_Shared subscription.
        """
        if self._shared:
            raise CumulativeAcknowledgementNotAllowedError(
                "cumulative acknowledgement is not allowed on Shared/Key_Shared subscriptions"
            )
        if self._left(cluster_of(message_id)):
            return  # through a position of another cluster: it would acknowledge unrelated ones
        key = entry_key(message_id)
        target: AckIdentity | None = wire_entry(key)
        batch_size = message_id.batch_size()
        if message_id.batch_index() >= 0 and batch_size > 0:
            unacked = self._batches.ack_up_to(key, message_id.batch_index(), batch_size)
            if unacked and self._config.batch_index_ack_enabled:
                target = (wire_entry(key), ack_set_words(unacked, batch_size))
            elif unacked:  # the entry is not done: acknowledge up to the previous one
                target = WireMessageId(key[0], key[1] - 1) if key[1] > 0 else None
        self.redelivery.forget_unacked_up_to(key)
        if target is not None:
            self._acks.write(commands.ack(self._consumer_id, [target], ack_type=AckType.Cumulative))

    def negative_acknowledge(self, message_id: MessageId) -> None:
        if self._left(cluster_of(message_id)):
            return  # the cluster it came from is left: nothing to redeliver here
        key = entry_key(message_id)
        due = self._loop.time() + self._config.negative_ack_redelivery_delay_ms / 1000
        first_chunk = message_id.first_chunk()
        if first_chunk is not None:
            chunks = self._entries.chunk_ids(key, (first_chunk, message_id.wire))
            self.redelivery.nack(key, [entry_key(chunk) for chunk in chunks], due)
        else:
            self.redelivery.nack(key, (key,), due)

    def _untrack(self, key: EntryKey) -> None:
        self.redelivery.forget(key)
        if self._dead_letter is not None:
            self._dead_letter.forget(key)

    # --- redelivery ---------------------------------------------------------------------

    def _on_due(self) -> None:
        consumer = self._consumer
        if not consumer.is_connected():
            if consumer.is_receiving():  # subscribing again: ask once subscribed
                self.redelivery.arm(self._loop.time() + 0.1)
            return
        due = self.redelivery.pop_due(self._loop.time())
        if self._dead_letter is not None and self._shared:
            due = self._dead_letter.send_due(due, self._dead_lettered, self._dead_letter_failed)
        if due:
            if self._shared:
                ids = [wire_entry(key) for key in sorted(set(due))]
                for start in range(0, len(ids), _REDELIVER_AT_ONCE):
                    self._acks.write(
                        commands.redeliver_unacknowledged_messages(
                            self._consumer_id, ids[start : start + _REDELIVER_AT_ONCE]
                        )
                    )
            else:
                consumer.redeliver_unacknowledged_messages()
        self.redelivery.arm_for_next()

    def dead_letter_now(self, key: EntryKey, messages: list[Message]) -> None:
        """``messages`` of entry ``key`` arrived redelivered more often than the dead-letter
        policy allows (after ``redeliver_unacknowledged_messages``, or a crash of a consumer
        before): published to the dead-letter topic without reaching the application."""
        if self._dead_letter is not None:
            self.redelivery.forget(key)
            self._dead_letter.send_now(key, messages, self._dead_lettered, self._dead_letter_failed)

    def _dead_lettered(self, messages: list[Message]) -> None:
        """The dead-letter topic stored these messages: acknowledge them here."""
        if self._consumer.is_receiving():
            for message in messages:
                self._consumer.acknowledge(message)

    def _dead_letter_failed(self, key: EntryKey, exc: Exception) -> None:
        # Never acknowledged unsent: redelivered instead.
        logger.warning("%s: dead-letter publication failed, redelivering: %r", self._consumer, exc)
        if self._consumer.is_connected():
            self._acks.write(
                commands.redeliver_unacknowledged_messages(self._consumer_id, [wire_entry(key)])
            )
