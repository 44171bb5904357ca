"""``RawEntry``: one received entry handed out whole, for bulk readers (``client.entry_reader``).

A reader in entry mode queues one ``RawEntry`` per entry instead of one ``Message`` per record:
the entry's position, redelivery count, parsed ``MessageMetadata`` and payload (decrypted and
decompressed; a batch's records still packed: ``protocol.batch_columns`` or ``split_batch``
split it), its message count, and which of its records are the reader's to take:
``first_index`` (those below are before the reader's start) and ``indexes`` (an ack set's
unacknowledged indexes on a redelivery; None: all).

Its ``message_id()`` is the id of its last record taken: the receiver queue remembers the last
item handed out by that id, and a reader resumes after it (after a reconnection) and compares
it with the topic's last message (``has_message_available``), exactly as for a message.
"""

from __future__ import annotations

from client.message_id import UNKNOWN_CLUSTER, MessageId, received_in
from protocol import pb

__all__ = ["RawEntry"]


class RawEntry:
    """One entry of a reader in entry mode (see the module docstring)."""

    __slots__ = (
        "_message_id",
        "chunked_id",
        "cluster",
        "count",
        "encrypted",
        "entry_id",
        "first_index",
        "indexes",
        "is_batch",
        "ledger_id",
        "metadata",
        "partition",
        "payload",
        "redelivery_count",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        ledger_id: int,
        entry_id: int,
        partition: int,
        metadata: pb.MessageMetadata,
        payload: bytes,
        *,
        redelivery_count: int = 0,
        cluster: str | None = UNKNOWN_CLUSTER,
        chunked_id: MessageId | None = None,
        encrypted: bool = False,
    ) -> None:
        self.topic = topic
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        #: The partition index the ids of its records carry (-1: not a partition).
        self.partition = partition
        self.metadata = metadata
        #: Decompressed (and decrypted, unless ``encrypted``): a batch's records, packed.
        self.payload = payload
        self.redelivery_count = redelivery_count
        self.cluster = cluster
        #: A message reassembled from chunks: its id (the last chunk's entry, first chunk).
        self.chunked_id = chunked_id
        #: Handed out still encrypted (``crypto_failure_action`` CONSUME): not to be split.
        self.encrypted = encrypted
        self.is_batch = metadata.HasField("num_messages_in_batch")
        #: Messages in the entry (what the broker counted as permits).
        self.count = metadata.num_messages_in_batch if self.is_batch else 1
        self.first_index = 0
        self.indexes: frozenset[int] | None = None
        self._message_id: MessageId | None = None

    def taken(self) -> list[int]:
        """The batch indexes that are the reader's to take, in order (``[0]`` for a whole
        entry that is not before the start)."""
        indexes = range(self.first_index, self.count)
        if self.indexes is None:
            return list(indexes)
        return [index for index in indexes if index in self.indexes]

    def message_id(self) -> MessageId:
        """The id of the last record taken (see the module docstring)."""
        message_id = self._message_id
        if message_id is None:
            if self.chunked_id is not None:
                message_id = self.chunked_id
            elif not self.is_batch:
                message_id = MessageId.of_entry(
                    self.ledger_id, self.entry_id, -1, 0, self.partition
                )
            else:
                last = self.taken()[-1]
                message_id = MessageId.of_entry(
                    self.ledger_id, self.entry_id, last, self.count, self.partition
                )
            message_id = self._message_id = received_in(message_id, self.cluster)
        return message_id

    def __repr__(self) -> str:
        return (
            f"RawEntry({self.ledger_id}:{self.entry_id}, {self.count} messages, "
            f"from index {self.first_index}, {len(self.payload)} bytes)"
        )
