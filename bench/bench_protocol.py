"""Micro-benchmark of the protocol codec: frames/s to decode and encode, on one core.

Run: ``.venv/bin/python bench/bench_protocol.py``. Prints one JSON object. Cases:

* ``send_100b``: SEND of one 100-byte message (with CRC-32C), the producer hot path;
* ``send_batch_1000``: SEND carrying a 1000-message batch of 100-byte messages (~110 KB);
* ``message_100b``: MESSAGE relaying a stored 100-byte entry, the dispatch hot path;
* ``send_receipt``: SEND_RECEIPT encode/decode (one per SEND on the broker).

SEND validation (issue #10: nothing unparseable is stored; budget 1 us per entry): the cost of
``SendEntryChecker.check`` in ns per entry for a single message, a 1000-message batch and a chunk,
and the broker's SEND read path side by side, decode only (before) vs decode + check (after),
in frames/s.

Decoding feeds a buffer of many frames into one FrameDecoder in 64 KiB chunks (as a socket
read loop would) and iterates. Each figure is the best of several timed rounds.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol import commands, pb
from protocol.batch import SingleMessage, encode_batch
from protocol.framing import FrameDecoder
from protocol.ids import MessageId
from protocol.metadata import SendEntryChecker, encode_entry

ROUNDS = 5
CHUNK = 64 * 1024


def _pin_to_one_core() -> int | None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
        return 0
    return None


def _single_entry() -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="bench-producer", sequence_id=12345, publish_time=1_700_000_000_000
    )
    return encode_entry(metadata, b"x" * 100)


def _batch_entry(count: int) -> bytes:
    payload = encode_batch(SingleMessage(b"x" * 100, sequence_id=i) for i in range(count))
    metadata = pb.MessageMetadata(
        producer_name="bench-producer",
        sequence_id=0,
        publish_time=1_700_000_000_000,
        num_messages_in_batch=count,
    )
    return encode_entry(metadata, payload)


def _best_rate(operation: Callable[[], int]) -> float:
    """Run ``operation`` (returns the number of frames it handled) and keep the best rate."""
    best = 0.0
    for _ in range(ROUNDS):
        start = time.perf_counter()
        handled = operation()
        elapsed = time.perf_counter() - start
        best = max(best, handled / elapsed)
    return best


def _encode_rate(build: Callable[[int], bytes], count: int) -> float:
    def run() -> int:
        for index in range(count):
            build(index)
        return count

    return _best_rate(run)


def _decode_rate(frame: bytes, count: int) -> float:
    stream = frame * count
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]

    def run() -> int:
        decoder = FrameDecoder()
        decoded = 0
        for chunk in chunks:
            decoder.feed(chunk)
            for _ in decoder:
                decoded += 1
        assert decoded == count
        return decoded

    return _best_rate(run)


def _check_ns(entry: bytes, num_messages: int, count: int = 200_000) -> float:
    checker = SendEntryChecker()
    check = checker.check

    def run() -> int:
        for _ in range(count):
            check(entry, num_messages)
        return count

    return 1e9 / _best_rate(run)


def _decode_and_check_rate(frame: bytes, count: int) -> float:
    """The broker's read path for SENDs with validation: decode, then check each entry."""
    stream = frame * count
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]
    check = SendEntryChecker().check

    def run() -> int:
        decoder = FrameDecoder()
        decoded = 0
        for chunk in chunks:
            decoder.feed(chunk)
            for decoded_frame in decoder:
                entry = decoded_frame.entry
                assert entry is not None
                check(entry, decoded_frame.command.send.num_messages)
                decoded += 1
        assert decoded == count
        return decoded

    return _best_rate(run)


def _chunk_entry() -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="bench-producer",
        sequence_id=12345,
        publish_time=1_700_000_000_000,
        uuid="bench-producer-12345",
        num_chunks_from_msg=3,
        total_chunk_msg_size=300,
        chunk_id=1,
    )
    return encode_entry(metadata, b"x" * 100)


def main() -> None:
    core = _pin_to_one_core()
    single = _single_entry()
    batch = _batch_entry(1000)
    cases: dict[str, tuple[Callable[[int], bytes], int]] = {
        "send_100b": (lambda i: commands.send(1, i, single), 100_000),
        "send_batch_1000": (lambda i: commands.send(1, i, batch, num_messages=1000), 2_000),
        "message_100b": (lambda i: commands.message(3, MessageId(7, i), single), 100_000),
        "send_receipt": (lambda i: commands.send_receipt(1, i, MessageId(7, i)), 100_000),
    }
    results: dict[str, object] = {
        "python": platform.python_version(),
        "pinned_core": core,
        "send_100b_frame_bytes": len(commands.send(1, 0, single)),
        "send_batch_1000_frame_bytes": len(commands.send(1, 0, batch, num_messages=1000)),
    }
    for name, (build, count) in cases.items():
        results[f"{name}_encode_frames_per_s"] = round(_encode_rate(build, count))
        results[f"{name}_decode_frames_per_s"] = round(_decode_rate(build(0), count))
    results["send_validation_ns_per_entry"] = {
        "single_100b": round(_check_ns(single, 1)),
        "batch_1000": round(_check_ns(batch, 1000)),
        "chunk": round(_check_ns(_chunk_entry(), 1)),
    }
    frame = commands.send(1, 0, single)
    results["send_100b_read_path_frames_per_s"] = {
        "decode_only_before": round(_decode_rate(frame, 100_000)),
        "decode_and_check_after": round(_decode_and_check_rate(frame, 100_000)),
    }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
