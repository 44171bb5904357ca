"""Pulsar's ``Murmur3_32Hash``: the key hash shared by every client and the broker.

``makeHash`` in the Java and C++ clients is MurmurHash3 x86 32-bit with seed 0 over the key's
bytes, masked to a non-negative ``int32``. Clients route keyed messages with it (partition =
hash % partitions, with the ``Murmur3_32Hash`` scheme) and the broker places Key_Shared sticky
keys with it (hash % 65536).
"""

from __future__ import annotations

import mmh3

__all__ = ["murmur3_32_hash"]


def murmur3_32_hash(data: bytes) -> int:
    """The non-negative 31-bit Murmur3 hash Pulsar uses for keys."""
    return mmh3.hash(data, 0, signed=False) & 0x7FFFFFFF
