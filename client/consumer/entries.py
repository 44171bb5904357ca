"""MESSAGE frames to the messages they hold, queued for the application.

As the official C++ consumer does:

* **Decoding.** Entry metadata, decompression bounded by the connection's
  ``max_message_size`` (the default 160 MiB bound for reassembled chunked messages), batch
  unpacking with per-message ids carrying ``batch_index`` and ``batch_size``, chunk reassembly
  (``ChunkAssembler``).
* **Corrupt entries** (bad checksum, codec or batch) are acknowledged with their validation
  error and dropped, and their permits come back.
* **Redelivered batches** carry an ack set: only the indexes still unacknowledged are queued.
* **Readers** (``durable=False``): messages before the start (inclusive or not) are filtered
  out, inside batches too (``StartFilter``).
* **Encrypted entries** (PIP-4) are decrypted first, each chunk on its own (the producer
  encrypts chunk by chunk), with the consumer's ``crypto_key_reader`` (``client.crypto``). One
  that cannot be (no reader, a wrong key) meets ``crypto_failure_action``, as in the C++
  ``ConsumerImpl::decryptMessageIfNeeded``: FAIL holds it (not handed out, not acknowledged,
  its permits not returned: the next consumer of the subscription gets it); DISCARD
  acknowledges it with ``DecryptionError``; CONSUME hands it out still encrypted and
  compressed, a batch as one message, as an ``UndecryptedMessage``.
* **Entry mode** (``deliver_entries``, for ``client.entry_reader``): each entry is queued
  whole, as a ``RawEntry``, not split into messages (see ``_on_whole_entry``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from client.acks import BatchAcks, EntryKey, entry_key, unacked_indexes
from client.chunking import ChunkAssembler, ChunkOutcome, is_chunk
from client.consumer.ack_grouping import AckGrouper
from client.consumer.config import ConsumerConfig
from client.consumer.policies import ConsumerCryptoFailureAction
from client.consumer.receiver_queue import ReceiverQueue
from client.crypto import EncryptionContext, MessageDecryptor
from client.message import Message, ReceivedEntry
from client.message_id import UNKNOWN_CLUSTER, MessageId
from client.raw_entry import RawEntry
from protocol import (
    Frame,
    RemoteProtocolError,
    commands,
    compression,
    decode_entry_plain,
    decode_plain_entry_lazily,
    pb,
    split_batch,
)
from protocol.enums import DEFAULT_MAX_MESSAGE_SIZE, AckValidationError
from protocol.ids import I64_MAX, from_u64
from protocol.ids import MessageId as WireMessageId
from protocol.topic_name import TopicName

if TYPE_CHECKING:
    from client.connection import Connection

__all__ = ["EntryDecoder", "StartFilter", "UndecryptedMessage"]

logger = logging.getLogger(__name__)

_U64_SIGN = 1 << 63  # wire ids at or above it are negative (``from_u64``)


class UndecryptedMessage(Message):
    """A message handed out still encrypted (``crypto_failure_action`` CONSUME): its data is
    the encrypted (and still compressed) payload, a whole batch for a batch entry."""

    __slots__ = ()

    def encryption_context(self) -> EncryptionContext:
        return EncryptionContext(self._entry.metadata, True)


class StartFilter:
    """A reader's start: what precedes it is not handed out (``before``).

    ``start`` and ``inclusive`` move with ``seek`` and, after a reconnection, to the last
    message handed out (exclusive), where the reader resumes.
    """

    __slots__ = ("active", "inclusive", "start")

    def __init__(self, config: ConsumerConfig) -> None:
        self.start: MessageId | None = config.start_message_id
        self.inclusive = config.start_message_id_inclusive
        #: Whether messages are checked at all (a reader with a start id).
        self.active = self.start is not None and not config.durable

    def move_to(self, start: MessageId, inclusive: bool) -> None:
        """A seek to a message id: filter from there."""
        self.start, self.inclusive, self.active = start, inclusive, True

    def turn_off(self) -> None:
        """A seek to a publish time: nothing is filtered."""
        self.start, self.active = None, False

    def resume_after(self, last_taken: MessageId | None) -> MessageId:
        """Where a (re)subscription starts: after the last message handed out (which becomes
        the start, exclusive), else at the start (earliest when there is none)."""
        if last_taken is None:
            return self.start or MessageId.earliest
        self.start, self.inclusive = last_taken, False
        return last_taken

    def before(self, message_id: MessageId) -> bool:
        """Is this message before the start (or the start, exclusive)?"""
        start = self.start
        # A durable consumer filters only after a seek by id (``move_to``), as the C++ one.
        if start is None or start.entry_id() in (-1, I64_MAX):
            return False  # earliest and latest are not positions of a message
        if start.batch_index() < 0 and message_id.batch_index() >= 0:
            # A whole-entry start id against a batch: the entry is the start message.
            entry = (message_id.ledger_id(), message_id.entry_id())
            start_entry = (start.ledger_id(), start.entry_id())
            return entry < start_entry or (entry == start_entry and not self.inclusive)
        if self.inclusive:
            return message_id < start
        return message_id <= start


class EntryDecoder:
    """Turns one consumer's MESSAGE frames into queued messages (see the module docstring).

    ``connection()`` is the consumer's connection now (its ``max_message_size`` bounds
    decompression); corrupt entries and chunk outcomes are acknowledged through ``acks``, and
    ``batches`` learns which indexes of each batch entry the application is to acknowledge.
    ``owner`` (the consumer) names the entries' recipient in log messages.
    """

    def __init__(
        self,
        owner: object,
        topic: str,
        consumer_id: int,
        config: ConsumerConfig,
        receiver: ReceiverQueue,
        acks: AckGrouper,
        batches: BatchAcks,
        connection: Callable[[], Connection | None],
    ) -> None:
        self._owner = owner
        self._topic = topic
        self._cluster: str | None = UNKNOWN_CLUSTER  # of the last entry's connection
        # The partition index (-1: not a partition) that the ids of received messages carry.
        self._partition = TopicName.parse(topic, allow_non_persistent=True).partition
        self._consumer_id = consumer_id
        self._durable = config.durable
        self._schema = config.schema
        self._receiver = receiver
        self._acks = acks
        self._batches = batches
        self._connection = connection
        self.start = StartFilter(config)
        self._assembler = ChunkAssembler(
            max_pending_chunked_message=config.max_pending_chunked_message,
            auto_ack_oldest_chunked_message_on_queue_full=(
                config.auto_ack_oldest_chunked_message_on_queue_full
            ),
        )
        #: Redeliveries past which an entry is not handed out but dead-lettered (the
        #: dead-letter policy's max_redeliver_count; no limit without one), and where it goes.
        self.exhausted_after = I64_MAX
        self.on_exhausted: Callable[[EntryKey, list[Message]], None] | None = None
        self._chunks: dict[EntryKey, tuple[WireMessageId, ...]] = {}  # last chunk -> all
        reader = config.crypto_key_reader
        self._decryptor = None if reader is None else MessageDecryptor(reader)
        self._crypto_failure_action = config.crypto_failure_action

    def chunk_ids(
        self, key: EntryKey, fallback: tuple[WireMessageId, ...]
    ) -> tuple[WireMessageId, ...]:
        """Every chunk of the chunked message whose last chunk is ``key``."""
        return self._chunks.get(key, fallback)

    def take_chunk_ids(
        self, key: EntryKey, fallback: tuple[WireMessageId, ...]
    ) -> tuple[WireMessageId, ...]:
        """``chunk_ids``, forgotten (the message is acknowledged)."""
        return self._chunks.pop(key, fallback)

    def clear(self) -> None:
        """The queue was dropped: so are chunked messages being reassembled."""
        self._assembler.clear()

    def on_message(self, frame: Frame) -> None:
        command = frame.command.message
        received = command.message_id  # the entry's position only: one id object, not two
        ledger, entry_id = received.ledgerId, received.entryId
        if ledger >= _U64_SIGN or entry_id >= _U64_SIGN:  # ``from_u64``, off the hot path
            ledger, entry_id = from_u64(ledger), from_u64(entry_id)
        entry = frame.entry
        assert entry is not None
        if not frame.checksum_valid:
            self._discard(WireMessageId(ledger, entry_id), AckValidationError.ChecksumMismatch, 1)
            return
        if not self.start.active:
            lazily = decode_plain_entry_lazily(entry)
            if lazily is not None:  # one plain message: its metadata is parsed if it is read
                self._on_plain(command.redelivery_count, ledger, entry_id, lazily[0], lazily[1])
                return
        try:
            metadata, payload, plain = decode_entry_plain(entry)
        except RemoteProtocolError:
            self._discard(
                WireMessageId(ledger, entry_id), AckValidationError.BatchDeSerializeError, 1
            )
            return
        if plain and not self.start.active:
            self._on_plain(command.redelivery_count, ledger, entry_id, metadata, payload)
        else:
            self._on_entry(command, ledger, entry_id, metadata, payload)

    def deliver_entries(self) -> None:
        """Entry mode: queue whole entries (``RawEntry``) instead of messages; a reader's
        only (no acknowledgement bookkeeping), set before its subscription starts. The switch
        replaces ``on_message`` on this instance: the per-message path is not touched."""
        assert not self._durable, "entry mode is for readers"
        self.on_message = self._on_whole_entry  # type: ignore[method-assign]

    def _on_whole_entry(self, frame: Frame) -> None:
        """Entry mode's ``on_message``: decrypted, reassembled and decompressed as for messages,
        then queued as one item. The broker counted the entry's messages as permits; the queued
        item holds one (returned when it is handed out, as a message's), the others come back
        now, so clears (seek, reconnection) count it right. The queue's bound is in entries."""
        command = frame.command.message
        received = command.message_id
        ledger, entry_id = from_u64(received.ledgerId), from_u64(received.entryId)
        assert frame.entry is not None
        wire = WireMessageId(ledger, entry_id)
        if not frame.checksum_valid:
            self._discard(wire, AckValidationError.ChecksumMismatch, 1)
            return
        try:
            metadata, payload, _ = decode_entry_plain(frame.entry)
        except RemoteProtocolError:
            self._discard(wire, AckValidationError.BatchDeSerializeError, 1)
            return
        opened = self._open(metadata, payload, ledger, entry_id)
        if opened is None:
            return
        metadata, payload, encrypted, bound, ids = opened
        chunked_id = None if ids is None else self._chunked_id(ids)
        entry = RawEntry(
            self._topic,
            ledger,
            entry_id,
            self._partition,
            metadata,
            payload,
            redelivery_count=command.redelivery_count,
            cluster=self._cluster,
            chunked_id=chunked_id,
            encrypted=encrypted,
        )
        if metadata.compression and not encrypted:
            try:
                entry.payload = compression.decode(
                    metadata.compression,
                    payload,
                    metadata.uncompressed_size,
                    max_uncompressed_size=bound,
                )
            except compression.CompressionError as exc:
                logger.warning("%s: discarding %s:%s: %s", self._owner, ledger, entry_id, exc)
                self._discard(wire, exc.validation_error, entry.count)
                return
        if command.ack_set:
            entry.indexes = frozenset(unacked_indexes(command.ack_set, entry.count))
        if self.start.active:
            entry.first_index = self._first_after_start(entry)
        if entry.first_index >= entry.count or not entry.taken():
            self._receiver.return_permits(entry.count)  # nothing of it is the reader's
            return
        self._receiver.append(entry)  # type: ignore[arg-type]  # an item like a message
        if entry.count > 1:
            self._receiver.return_permits(entry.count - 1)

    def _first_after_start(self, entry: RawEntry) -> int:
        """The first index of ``entry`` not before the reader's start (its count: none).
        ``StartFilter.before`` grows false with the index: asked at most once per index of
        the start's own entry, once or twice for any other."""
        before = self.start.before
        if entry.encrypted or not entry.is_batch:
            whole = entry.chunked_id or MessageId.of_entry(
                entry.ledger_id, entry.entry_id, -1, 0, entry.partition
            )
            return entry.count if before(whole) else 0
        count = entry.count

        def record(index: int) -> MessageId:
            return MessageId.of_entry(
                entry.ledger_id, entry.entry_id, index, count, entry.partition
            )

        if not before(record(0)):
            return 0
        if before(record(count - 1)):
            return count
        return next(index for index in range(1, count) if not before(record(index)))

    def _on_plain(
        self,
        redelivery_count: int,
        ledger: int,
        entry_id: int,
        metadata: pb.MessageMetadata | bytes,
        payload: bytes,
    ) -> None:
        """The common case: one message, as sent, nothing to filter; its id is made lazily
        (and its metadata parsed lazily when it comes as bytes)."""
        cnx = self._connection()
        # Where it was received: its acknowledgement is dropped on any other cluster.
        self._cluster = cluster = cnx.cluster if cnx is not None else UNKNOWN_CLUSTER
        entry = ReceivedEntry(
            self._topic,
            metadata,
            ledger,
            entry_id,
            0,
            self._partition,
            redelivery_count,
            self._schema,
            cluster,
        )
        message = Message.of_whole_entry(entry, payload)
        if redelivery_count > self.exhausted_after:
            self._exhausted((ledger, entry_id), [message], 1)
            return
        self._receiver.append(message)

    def _open(
        self, metadata: pb.MessageMetadata, payload: bytes, ledger: int, entry_id: int
    ) -> tuple[pb.MessageMetadata, bytes, bool, int, tuple[WireMessageId, ...] | None] | None:
        """What every entry but a plain one goes through first: decryption, noting where it was
        received (its acknowledgement is dropped on any other cluster), chunk reassembly. Gives
        the metadata and payload to go on with, whether the payload is still encrypted (the
        crypto failure action delivers it so), the bound on its uncompressed size and, for a
        reassembled message, its chunks' ids; None when nothing goes on: held or discarded by
        decryption, or a chunk of a message not complete yet (its permit returned)."""
        encrypted = False
        if metadata.encryption_keys:
            decrypted = self._decrypt(metadata, payload, ledger, entry_id)
            if decrypted is None:
                return None
            payload, encrypted = decrypted
        cnx = self._connection()
        bound = cnx.max_message_size if cnx is not None else DEFAULT_MAX_MESSAGE_SIZE
        self._cluster = cnx.cluster if cnx is not None else UNKNOWN_CLUSTER
        if not (metadata.num_chunks_from_msg and is_chunk(metadata)):
            return metadata, payload, encrypted, bound, None
        wire = WireMessageId(ledger, entry_id)
        outcome = self._assembler.add(metadata, payload, wire, int(time.time() * 1000))
        self._chunk_outcome(outcome)
        if outcome.message is None:
            self._receiver.return_permits(1)
            return None
        message = outcome.message
        bound = compression.DEFAULT_MAX_UNCOMPRESSED_SIZE
        return message.metadata, message.payload, encrypted, bound, message.chunk_ids

    def _chunked_id(self, ids: tuple[WireMessageId, ...]) -> MessageId:
        """The id of a reassembled message: its last chunk's, remembering its first chunk."""
        return MessageId.from_wire(
            dataclasses.replace(ids[-1], partition=self._partition), first_chunk=ids[0]
        )

    def _on_entry(
        self,
        command: pb.CommandMessage,
        ledger: int,
        entry_id: int,
        metadata: pb.MessageMetadata,
        payload: bytes,
    ) -> None:
        """Every other entry: encrypted, chunked, compressed, a batch, or behind a start."""
        opened = self._open(metadata, payload, ledger, entry_id)
        if opened is None:
            return
        metadata, payload, undecrypted, bound, ids = opened
        message_id: MessageId | None = None
        if ids is not None:
            message_id = self._chunked_id(ids)
            self._chunks[entry_key(ids[-1])] = ids
        is_batch = metadata.HasField("num_messages_in_batch")
        count = metadata.num_messages_in_batch if is_batch else 1
        if undecrypted:
            if message_id is None:
                message_id = MessageId.of_entry(ledger, entry_id, -1, 0, self._partition)
            self._deliver_undecrypted(command, metadata, payload, message_id, count)
            return
        if metadata.compression:
            try:
                payload = compression.decode(
                    metadata.compression,
                    payload,
                    metadata.uncompressed_size,
                    max_uncompressed_size=bound,
                )
            except compression.CompressionError as exc:
                logger.warning("%s: discarding %s:%s: %s", self._owner, ledger, entry_id, exc)
                self._discard(WireMessageId(ledger, entry_id), exc.validation_error, count)
                return
        if not is_batch:
            if message_id is None and not self.start.active:  # e.g. compressed: lazy id
                self._on_plain(command.redelivery_count, ledger, entry_id, metadata, payload)
                return
            if message_id is None:
                message_id = MessageId.of_entry(ledger, entry_id, -1, 0, self._partition)
            if self.start.active and self.start.before(message_id):
                self._receiver.return_permits(1)
                return
            message = Message(
                payload,
                message_id,
                self._topic,
                metadata,
                redelivery_count=command.redelivery_count,
                schema=self._schema,
                cluster=self._cluster,
            )
            if command.redelivery_count > self.exhausted_after:
                self._exhausted((ledger, entry_id), [message], 1)
                return
            self._receiver.append(message)
            return
        self._on_batch(command, ledger, entry_id, metadata, payload, count)

    def _on_batch(
        self,
        command: pb.CommandMessage,
        ledger: int,
        entry_id: int,
        metadata: pb.MessageMetadata,
        payload: bytes,
        count: int,
    ) -> None:
        """Queue the messages of a batch entry the broker still has to deliver to us."""
        try:
            records = split_batch(payload, count)
        except (RemoteProtocolError, ValueError) as exc:
            logger.warning("%s: discarding batch %s:%s: %s", self._owner, ledger, entry_id, exc)
            self._discard(
                WireMessageId(ledger, entry_id), AckValidationError.BatchDeSerializeError, count
            )
            return
        # An ack set names the indexes still unacknowledged (a redelivery after partial acks).
        to_deliver = unacked_indexes(command.ack_set, count) if command.ack_set else None
        if self._durable:
            self._batches.delivered(
                (ledger, entry_id), count, set(range(count)) if to_deliver is None else to_deliver
            )
        redelivery = command.redelivery_count
        start, partition = self.start, self._partition
        entry = ReceivedEntry(
            self._topic,
            metadata,
            ledger,
            entry_id,
            count,
            partition,
            redelivery,
            self._schema,
            self._cluster,
        )
        of_record = Message.of_record
        append = self._receiver.messages.append
        exhausted: list[Message] = []
        if redelivery > self.exhausted_after:  # dead-lettered, not handed out
            append = exhausted.append
        skipped = 0
        if to_deliver is None and not start.active:  # the common case: every message
            for index, (single, data) in enumerate(records):
                append(of_record(entry, index, single, data))
        else:
            of_entry = MessageId.of_entry
            for index, (single, data) in enumerate(records):
                if (to_deliver is not None and index not in to_deliver) or (
                    start.active
                    and start.before(of_entry(ledger, entry_id, index, count, partition))
                ):
                    skipped += 1
                    continue
                append(of_record(entry, index, single, data))
        if exhausted:
            self._exhausted((ledger, entry_id), exhausted, count - skipped)
        elif skipped < count:
            self._receiver.wake()
        if skipped:
            self._receiver.return_permits(skipped)

    def _decrypt(
        self, metadata: pb.MessageMetadata, payload: bytes, ledger: int, entry_id: int
    ) -> tuple[bytes, bool] | None:
        """The payload decrypted (and False), or still encrypted (and True) to be handed out
        so (CONSUME); None when the entry is held (FAIL) or discarded (DISCARD)."""
        if self._decryptor is not None:
            plain = self._decryptor.decrypt(metadata, payload)
            if plain is not None:
                return plain, False
        action = self._crypto_failure_action
        logger.warning(
            "%s: cannot decrypt %s:%s (%s): %s",
            self._owner,
            ledger,
            entry_id,
            "no crypto_key_reader" if self._decryptor is None else "no key opens it",
            action.name,
        )
        if action == ConsumerCryptoFailureAction.CONSUME:
            return payload, True
        if action == ConsumerCryptoFailureAction.DISCARD:
            count = (
                metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
            )
            self._discard(
                WireMessageId(ledger, entry_id), AckValidationError.DecryptionError, count
            )
        # FAIL: neither handed out nor acknowledged, and its permits stay taken, as the C++
        # consumer does: the broker redelivers it to the next consumer of the subscription.
        return None

    def _deliver_undecrypted(
        self,
        command: pb.CommandMessage,
        metadata: pb.MessageMetadata,
        payload: bytes,
        message_id: MessageId,
        count: int,
    ) -> None:
        """Hand out an entry still encrypted: one message, even for a batch (its records
        cannot be read), so a batch's other permits come back at once."""
        if self.start.active and self.start.before(message_id):
            self._receiver.return_permits(count)
            return
        message = UndecryptedMessage(
            payload,
            message_id,
            self._topic,
            metadata,
            redelivery_count=command.redelivery_count,
            schema=self._schema,
            cluster=self._cluster,
        )
        self._receiver.append(message)
        if count > 1:
            self._receiver.return_permits(count - 1)

    def _exhausted(self, key: EntryKey, messages: list[Message], permits: int) -> None:
        """An entry redelivered more than the dead-letter policy allows (C++ and Java do the
        same on arrival): not handed out, but published to the dead-letter topic (and then
        acknowledged) by ``on_exhausted``; its permits come back at once."""
        if self.on_exhausted is not None:
            self.on_exhausted(key, messages)
        self._receiver.return_permits(permits)

    def _discard(self, wire: WireMessageId, error: AckValidationError | int, permits: int) -> None:
        if self._durable and self._connection() is not None:
            self._acks.write(commands.ack(self._consumer_id, [wire], validation_error=int(error)))
        self._receiver.return_permits(permits)

    def _chunk_outcome(self, outcome: ChunkOutcome) -> None:
        for wire in outcome.ack:
            self._acks.add(wire)
        if outcome.redeliver:
            self._acks.write(
                commands.redeliver_unacknowledged_messages(self._consumer_id, outcome.redeliver)
            )
