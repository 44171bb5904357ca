"""CRC-32C (Castagnoli) as used by Pulsar payload frames.

The checksum of a SEND/MESSAGE frame covers ``[metadataSize][metadata][payload]``. The work is
done by the C extension of the ``crc32c`` package (hardware instructions where the CPU has them);
a pure-Python loop would cost more than the rest of the frame handling together.

``crc32c(b"123456789") == 0xE3069283``. Passing a previous result as ``value`` continues the
checksum, so ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crc32c import crc32c as _crc32c

from protocol._accel import speedups

#: Anything exposing a contiguous byte buffer (``collections.abc.Buffer`` needs Python 3.12).
BytesLike = bytes | bytearray | memoryview


def py_crc32c(data: BytesLike, value: int = 0) -> int:
    """Return the CRC-32C of ``data``, continuing from ``value`` (0 to start)."""
    result: int = _crc32c(data, value)
    return result


_speedups = speedups()
if TYPE_CHECKING:
    crc32c = py_crc32c
elif _speedups is not None:  # the C implementation, called without a Python frame
    crc32c = _speedups.crc32c
else:
    crc32c = py_crc32c
