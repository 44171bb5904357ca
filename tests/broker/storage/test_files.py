"""broker.storage.files: vectored writes (``write_all_parts``) and the layer's ``pwritev``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.storage.files import IOV_MAX, FileLayer, OsFileLayer, write_all_parts


class ShortWrites(FileLayer):
    """Accepts at most ``limit`` bytes per vectored call, as a regular file may."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.vectored_calls: list[int] = []

    def pwritev(self, fd: int, buffers: Sequence[bytes], offset: int) -> int:
        self.vectored_calls.append(len(buffers))
        data = b"".join(buffers)[: self.limit]
        return os.pwrite(fd, data, offset)


class CountedWrites(OsFileLayer):
    """Intercepts ``pwrite`` the way the fault-injecting layers of the tests do."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self.writes.append(bytes(data))
        return super().pwrite(fd, data, offset)


def written(path: Path, layer: FileLayer, parts: list[bytes], offset: int = 0) -> bytes:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        write_all_parts(layer, fd, parts, offset)
    finally:
        os.close(fd)
    return path.read_bytes()[offset:]


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(st.binary(max_size=40), max_size=30),
    limit=st.integers(1, 64),
    offset=st.integers(0, 9),
)
def test_short_writes_resume_where_they_stopped(
    tmp_path_factory: pytest.TempPathFactory, parts: list[bytes], limit: int, offset: int
) -> None:
    path = tmp_path_factory.mktemp("parts") / "file"
    assert written(path, ShortWrites(limit), parts, offset) == b"".join(parts)


def test_more_parts_than_one_call_takes(tmp_path: Path) -> None:
    parts = [i.to_bytes(4, "little") for i in range(IOV_MAX * 2 + 3)]
    layer = ShortWrites(limit=1 << 30)
    assert written(tmp_path / "many", layer, parts) == b"".join(parts)
    assert layer.vectored_calls == [IOV_MAX, IOV_MAX, 3]


def test_the_real_layer_writes_the_parts_in_one_call(tmp_path: Path) -> None:
    parts = [b"head", b"", b"entry" * 1000, b"tail"]
    assert written(tmp_path / "real", OsFileLayer(), parts, offset=5) == b"".join(parts)


def test_a_layer_intercepting_pwrite_sees_the_parts_as_one_write(tmp_path: Path) -> None:
    layer = CountedWrites()
    parts = [b"header01", b"first entry", b"header02", b"second"]
    assert written(tmp_path / "counted", layer, parts) == b"".join(parts)
    assert layer.writes == [b"".join(parts)]
