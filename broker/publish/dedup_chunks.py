"""Chunked messages under PIP-6 dedup (PIP-37): the progress of the chunked message in flight.

Every chunk carries the message's sequence id. Java checks only the last chunk and stores every
other chunk unconditionally, so a client that resends a whole chunked message (its receipts were
lost in a crash) gets its leading chunks stored twice. We also track, per name, the progress
``(sequence_id, chunk_id)`` of the one chunked message in flight (pushed and persisted, like the
marks of ``broker.publish.dedup``, and kept in snapshots under reserved keys, see
``broker.publish.dedup_marks``): a chunk at or below the persisted progress is a DUP, one below
the pushed progress UNKNOWN, and the message's sequence id enters the marks only with its last
chunk, as in Java. A resend is thus stored once, chunk by chunk, whatever part of it was durable
before.

Like the marks, this is pure state: no I/O, no clock; ``MessageDeduplication`` owns one and
decides, with its marks, when a chunk is judged here.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.publish.dedup_types import NO_SEQUENCE_ID, DedupResult

ChunkProgress = tuple[int, int]
"""``(sequence_id, chunk_id)`` of the last chunk of an unfinished chunked message."""

_NOT_DUP = DedupResult.NOT_DUP


class ChunkedMessages:
    """Per producer name, how far its chunked message in flight was pushed and persisted.

    A name is here only while its chunked message is above its mark; the entry is dropped once
    the last chunk is pushed or persisted.
    """

    __slots__ = ("persisted", "pushed")

    def __init__(self) -> None:
        self.pushed: dict[str, ChunkProgress] = {}
        self.persisted: dict[str, ChunkProgress] = {}

    def restore(self, persisted: dict[str, ChunkProgress]) -> None:
        """Seed the persisted progress from a snapshot, at the start of a recovery."""
        self.persisted = persisted

    def replay(self, producer_name: str, sequence_id: int, chunk_id: int) -> None:
        """A stored chunk that is not the last of its message, replayed in log order."""
        self.persisted[producer_name] = max(
            self.persisted.get(producer_name, (NO_SEQUENCE_ID, NO_SEQUENCE_ID)),
            (sequence_id, chunk_id),
        )

    def finish_recovery(self, marks: Mapping[str, int]) -> None:
        """Drop the progress of messages completed later in the log (their id is at or below
        the recovered mark ``marks[name]``); what remains is pushed as well as persisted."""
        for name, (chunk_seq, _chunk_id) in list(self.persisted.items()):
            if chunk_seq <= marks.get(name, NO_SEQUENCE_ID):
                del self.persisted[name]  # its message was completed later in the log
        self.pushed = dict(self.persisted)

    def check(
        self, producer_name: str, sequence_id: int, chunk_id: int, is_last: bool
    ) -> DedupResult:
        """Judge a chunk of a message above the name's pushed mark; if new, push it.

        * a chunk at or below the persisted progress of this message: DUP; at or below its
          pushed progress only: UNKNOWN.
        * otherwise NOT_DUP: a non-last chunk moves the pushed progress, the last chunk ends it
          (the caller moves the pushed mark to the message's id).
        """
        progress = self.pushed.get(producer_name)
        if progress is not None and progress[0] == sequence_id and chunk_id <= progress[1]:
            done = self.persisted.get(producer_name)
            if done is not None and done[0] == sequence_id and chunk_id <= done[1]:
                return DedupResult.DUP
            return DedupResult.UNKNOWN
        if is_last:
            self.pushed.pop(producer_name, None)
        else:
            self.pushed[producer_name] = (sequence_id, chunk_id)
        return _NOT_DUP

    def on_persisted(self, producer_name: str, sequence_id: int, chunk_id: int) -> None:
        """Storage made a chunk that is not the last of its message durable (log order)."""
        progress = (sequence_id, chunk_id)
        if self.persisted.get(producer_name, (NO_SEQUENCE_ID, 0)) < progress:
            self.persisted[producer_name] = progress
        if self.pushed.get(producer_name, (NO_SEQUENCE_ID, 0)) < progress:
            self.pushed[producer_name] = progress

    def on_message_persisted(self, producer_name: str, highest_sequence_id: int) -> None:
        """An entry of this name up to ``highest_sequence_id`` is durable: a chunked message at
        or below it is complete (or abandoned) and no longer tracked."""
        for chunks in (self.persisted, self.pushed):
            if chunks:
                chunked = chunks.get(producer_name)
                if chunked is not None and chunked[0] <= highest_sequence_id:
                    del chunks[producer_name]  # that chunked message is complete (or abandoned)

    def on_write_failed(self) -> None:
        """A write failed: the pushed progress falls back to the persisted one, as the marks."""
        self.pushed = dict(self.persisted)

    def forget(self, producer_name: str) -> None:
        """The name was purged: drop its progress."""
        self.pushed.pop(producer_name, None)
        self.persisted.pop(producer_name, None)
