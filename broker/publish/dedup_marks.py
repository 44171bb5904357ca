"""The dedup snapshot as a map of ints: what ``MessageDeduplication.snapshot`` hands out and
``MessageDeduplication.begin_recovery`` reads back.

The map is ``{producer_name: highest persisted sequence id}``, ordered least recently persisted
first and bounded to the most recently persisted names. The progress of a chunked message in
flight (``broker.publish.dedup_chunks``) rides along under reserved keys. Storing it on the
dedup cursor is ``broker.publish.dedup_snapshot``'s business.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from broker.publish.dedup_chunks import ChunkProgress

# Snapshot keys holding a name's chunk progress. Producer names are protobuf strings and never
# start with NUL, so these cannot collide with a name.
_CHUNK_SEQ_KEY = "\x00chunk-seq\x00"
_CHUNK_ID_KEY = "\x00chunk-id\x00"


def encode_marks(
    persisted: dict[str, int], chunks: Mapping[str, ChunkProgress], bound: int
) -> dict[str, int]:
    """The snapshot map of the persisted marks (least recently persisted first) and the chunk
    progress, keeping the ``bound`` most recently persisted names (chunk progress only for
    names kept, or while there is room)."""
    if len(persisted) <= bound:
        marks = dict(persisted)
    else:
        newest_first = list(itertools.islice(reversed(persisted.items()), bound))
        newest_first.reverse()
        marks = dict(newest_first)
    for name, (chunk_seq, chunk_id) in chunks.items():
        if name in marks or len(marks) < bound:
            marks[_CHUNK_SEQ_KEY + name] = chunk_seq
            marks[_CHUNK_ID_KEY + name] = chunk_id
    return marks


def decode_marks(
    snapshot: Mapping[str, int],
) -> tuple[dict[str, int], dict[str, ChunkProgress]]:
    """A snapshot map read back: the persisted marks in their stored order, and the progress
    of the chunked messages that were in flight."""
    marks: dict[str, int] = {}
    chunk_seqs: dict[str, int] = {}
    chunk_ids: dict[str, int] = {}
    for key, value in snapshot.items():
        if key.startswith(_CHUNK_SEQ_KEY):
            chunk_seqs[key[len(_CHUNK_SEQ_KEY) :]] = value
        elif key.startswith(_CHUNK_ID_KEY):
            chunk_ids[key[len(_CHUNK_ID_KEY) :]] = value
        else:
            marks[key] = value
    chunks: dict[str, ChunkProgress] = {}
    for name, chunk_seq in chunk_seqs.items():
        if name in chunk_ids:
            chunks[name] = (chunk_seq, chunk_ids[name])
    return marks, chunks
