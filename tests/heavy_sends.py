"""Entries of the SEND shapes that once kept the broker's event loop busy for seconds (issue #24).

Shared by the stall benchmark (``bench/bench_stall.py``), the session fuzzer and the publish
path's tests, so all three send the same bytes. Each builder returns a whole entry
(``[metadataSize][MessageMetadata][payload]``); none does any I/O. ``TurnSampler`` watches how
much a broker does per turn of its loop, ``LoopGap`` the longest time its loop was busy.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from protocol import pb
from protocol.batch import SingleMessage, encode_batch
from protocol.compression import encode as compress
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY, CompressionType
from protocol.metadata import encode_entry

_EMPTY_RECORD = encode_batch([SingleMessage(b"")])  # 6 bytes: size, then payload_size = 0


def empty_record_batch(
    producer_name: str, sequence_id: int, payload_bytes: int = 4 << 20
) -> tuple[bytes, int]:
    """An uncompressed batch of ``payload_bytes`` of empty records, and its message count.

    Sent at or below the producer's high-water mark it takes dedup's rare path, which used to
    read every record's sequence id (4 MiB: ~700,000 records, ~4 s on the loop)."""
    count = max(2, payload_bytes // len(_EMPTY_RECORD))
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=1,
        num_messages_in_batch=count,
    )
    return encode_entry(metadata, _EMPTY_RECORD * count), count


def zstd_key_bomb(
    producer_name: str, sequence_id: int, key: str, uncompressed_bytes: int = 8 << 20
) -> tuple[bytes, int]:
    """A zstd batch of ``uncompressed_bytes`` of 6-byte records, the first with an idempotency
    key, and its message count: under 1 KiB on the wire, and once ~10 s of the key check."""
    keyed = encode_batch([SingleMessage(b"", properties={IDEMPOTENCY_KEY_PROPERTY: key})])
    count = max(2, (uncompressed_bytes - len(keyed)) // len(_EMPTY_RECORD) + 1)
    plain = keyed + _EMPTY_RECORD * (count - 1)
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=1,
        num_messages_in_batch=count,
        compression=pb.CompressionType.ZSTD,
        uncompressed_size=len(plain),
    )
    return encode_entry(metadata, compress(CompressionType.ZSTD, plain)), count


def keyed_batch(
    producer_name: str, sequence_id: int, keys: list[str], payload: bytes = b"x"
) -> bytes:
    """An uncompressed batch with one idempotency key per message."""
    messages = [SingleMessage(payload, properties={IDEMPOTENCY_KEY_PROPERTY: k}) for k in keys]
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=1,
        num_messages_in_batch=len(keys),
    )
    return encode_entry(metadata, encode_batch(messages))


def chunk(
    producer_name: str, sequence_id: int, uuid: str, chunk_id: int, num_chunks: int, data: bytes
) -> bytes:
    """One chunk (PIP-37) of a chunked message of ``num_chunks`` chunks."""
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=1,
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=num_chunks,
        total_chunk_msg_size=num_chunks * len(data),
    )
    return encode_entry(metadata, data)


class TurnSampler:
    """Reads a number once per turn of a broker's event loop (a callback that re-schedules
    itself with ``call_soon`` runs once per turn) and keeps the largest change between two
    consecutive turns: the most work of that kind done in one turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read: Callable[[], int]) -> None:
        self.largest_step = 0
        self.turns = 0
        self._loop = loop
        self._read = read
        self._last: int | None = None
        self._stopping = False
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        loop.call_soon_threadsafe(self._tick)

    def _tick(self) -> None:
        try:
            value = self._read()
        except Exception as exc:  # reported by stop(), in the test's thread
            self._error = exc
            self._stopped.set()
            return
        if self._last is not None:
            self.largest_step = max(self.largest_step, abs(value - self._last))
        self._last = value
        self.turns += 1
        if self._stopping:
            self._stopped.set()
        else:
            self._loop.call_soon(self._tick)

    def stop(self) -> int:
        """Stop sampling; the largest step seen (raises what reading raised)."""
        self._stopping = True
        assert self._stopped.wait(10), "the broker loop stopped turning"
        if self._error is not None:
            raise self._error
        return self.largest_step


class LoopGap:
    """Runs on a broker's loop: the longest time between two of its 5 ms wake-ups, which is at
    least the longest time something else kept the loop busy."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.worst = 0.0
        self._stop = False
        self._task = asyncio.run_coroutine_threadsafe(self._sample(), loop)

    async def _sample(self) -> None:
        last = time.monotonic()
        while not self._stop:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            self.worst = max(self.worst, now - last)
            last = now

    def stop(self) -> float:
        """Stop sampling; the longest gap seen, in seconds."""
        self._stop = True
        self._task.result(10)
        return self.worst
