"""protocol.checksum: CRC-32C check value and chaining."""

from __future__ import annotations

from protocol.checksum import crc32c


def test_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_empty_input() -> None:
    assert crc32c(b"") == 0


def test_chaining_equals_one_pass() -> None:
    data = bytes(range(256)) * 40
    assert crc32c(data[1000:], crc32c(data[:1000])) == crc32c(data)


def test_accepts_buffers() -> None:
    data = b"metadata+payload"
    assert crc32c(memoryview(data)) == crc32c(bytearray(data)) == crc32c(data)
