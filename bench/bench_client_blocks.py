"""Micro-benchmark of the client's pure building blocks (batching, compression, chunking).

Run: ``.venv/bin/python bench/bench_client_blocks.py``. Prints one JSON object:

* ``batch_build_us``: add 1000 messages of 100 B to a ``BatchBuilder`` and build the entry,
  per codec (µs per batch; divide by 1000 for the cost per message);
* ``codecs``: compress and decompress MB/s (of uncompressed bytes) and the ratio, for a 128 KiB
  batch payload of JSON-like 100 B messages (what a batching producer compresses);
* ``chunking_ms``: split a 12 MiB payload into 5 MiB entries, and reassemble them.

Each figure is the best of several rounds on one core.
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

from client.batching import BatchBuilder, OutgoingMessage, message_metadata
from client.chunking import ChunkAssembler, split_into_chunks
from protocol import compression
from protocol.enums import CompressionType
from protocol.ids import MessageId
from protocol.metadata import decode_entry

ROUNDS = 7


def _best_seconds(operation: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        operation()
        best = min(best, time.perf_counter() - start)
    return best


def _batch_build_us(codec: CompressionType) -> float:
    messages = [
        OutgoingMessage(b'{"user": %06d, "event": "click", "page": "/home/index"}' % i, i)
        for i in range(1000)
    ]
    payloads = [m._replace(payload=m.payload.ljust(100, b" ")) for m in messages]

    def build() -> object:
        builder = BatchBuilder(max_bytes=1 << 20)
        for message in payloads:
            builder.add(message, 0)
        return builder.build(producer_name="bench", codec=codec)

    return _best_seconds(build) * 1e6


def _batch_payload() -> bytes:
    builder = BatchBuilder(max_messages=10_000)
    sequence_id = 0
    while True:
        record = b'{"user": %06d, "event": "click", "page": "/home/index"}' % sequence_id
        if not builder.add(OutgoingMessage(record.ljust(100, b" "), sequence_id), 0):
            break
        sequence_id += 1
    _, payload = decode_entry(builder.build(producer_name="bench").entry)
    return payload


def _codec_rates(payload: bytes) -> dict[str, dict[str, float]]:
    rates = {}
    for codec in CompressionType:
        if codec is CompressionType.NONE:
            continue
        compressed = compression.encode(codec, payload)
        encode_s = _best_seconds(lambda c=codec: compression.encode(c, payload))
        decode_s = _best_seconds(
            lambda c=codec, z=compressed: compression.decode(c, z, len(payload))
        )
        rates[codec.name] = {
            "compress_mb_s": round(len(payload) / encode_s / 1e6, 1),
            "decompress_mb_s": round(len(payload) / decode_s / 1e6, 1),
            "ratio": round(len(payload) / len(compressed), 2),
        }
    return rates


def _chunking_ms() -> dict[str, float]:
    payload = os.urandom(12 * 1024 * 1024)
    metadata = message_metadata(OutgoingMessage(b"", 1), producer_name="bench", publish_time=1)
    chunks = split_into_chunks(metadata, payload, 5 * 1024 * 1024)
    decoded = [decode_entry(chunk.entry) for chunk in chunks]

    def reassemble() -> object:
        assembler = ChunkAssembler()
        for index, (md, piece) in enumerate(decoded):
            outcome = assembler.add(md, piece, MessageId(1, index), 0)
        assert outcome.message is not None
        return outcome

    return {
        "chunks": len(chunks),
        "split_12mib_ms": round(
            _best_seconds(lambda: split_into_chunks(metadata, payload, 5 * 1024 * 1024)) * 1e3, 2
        ),
        "reassemble_12mib_ms": round(_best_seconds(reassemble) * 1e3, 2),
    }


def main() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    payload = _batch_payload()
    result = {
        "python": platform.python_version(),
        "batch_build_us": {codec.name: round(_batch_build_us(codec)) for codec in CompressionType},
        "codec_payload_bytes": len(payload),
        "codecs": _codec_rates(payload),
        "chunking_ms": _chunking_ms(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
