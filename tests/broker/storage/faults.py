"""Test-only file layers: no-sync (fast), fault injection, and simulated power loss.

``SimulatedDisk`` models what a crash of the whole machine does to files: for every file it
remembers the content as of its last ``fsync``/``fdatasync`` (the "durable image"). When power
is cut, each file that changed since then keeps the new bytes only up to a random cut point
between the first changed byte and the end of what was written, with the durable image beyond
it; optionally the last (up to) 512 bytes before the cut are torn (garbage or zeros). Renames,
creations and unlinks are treated as durable at once: the storage code always fsyncs the
directory right after them, and modelling lost directory entries is out of scope.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from broker.storage.files import FileLayer

T = TypeVar("T")


class SimulatedCrash(BaseException):
    """Raised by every call on a ``SimulatedDisk`` whose power was cut (the process "dies").

    A ``BaseException`` so that no ``except OSError``/``except Exception`` in the code under test
    can swallow it and carry on as if it had survived.
    """


class NoSyncLayer(FileLayer):
    """Real files, but fsync/fdatasync are no-ops: for tests that do not test durability."""

    def fdatasync(self, fd: int) -> None:
        pass

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: Path) -> None:
        pass


class HeldSync(NoSyncLayer):
    """fdatasync, fsync and directory syncs block while ``held``: a disk that does not answer.
    ``entered`` is set when a sync call is waiting."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.released.set()
        self.entered = threading.Event()

    def hold(self) -> None:
        self.entered.clear()
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def fdatasync(self, fd: int) -> None:
        self._wait()

    def fsync(self, fd: int) -> None:
        self._wait()

    def fsync_dir(self, path: Path) -> None:
        self._wait()

    def _wait(self) -> None:
        if not self.released.is_set():
            self.entered.set()
            self.released.wait(30)


class InlineExecutor(Executor):
    """Runs submitted work synchronously (deterministic pre-allocation in tests)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


@dataclass
class _Rule:
    operation: str
    error: int
    path_suffix: str
    remaining: int
    before: Callable[[], None] | None


class FaultyLayer(NoSyncLayer):
    """Injects ``OSError`` on chosen calls: ``fail("fdatasync", errno.EIO, suffix=".seg")``."""

    def __init__(self) -> None:
        self._rules: list[_Rule] = []
        self._fd_paths: dict[int, Path] = {}
        self.calls: list[tuple[str, str]] = []

    def fail(
        self,
        operation: str,
        error: int = errno.EIO,
        *,
        suffix: str = "",
        times: int = 1,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``operation`` on a path ending in ``suffix`` fail.

        ``before`` runs just before raising (e.g. to append concurrently "during" the flush).
        """
        self._rules.append(_Rule(operation, error, suffix, times, before))

    def _check(self, operation: str, path: Path | None) -> None:
        name = str(path) if path is not None else ""
        self.calls.append((operation, name))
        for rule in self._rules:
            if rule.remaining and rule.operation == operation and name.endswith(rule.path_suffix):
                rule.remaining -= 1
                if rule.before is not None:
                    rule.before()
                raise OSError(rule.error, os.strerror(rule.error), name)

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        self._check("open", path)
        fd = super().open(path, flags, mode)
        self._fd_paths[fd] = path
        return fd

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self._check("pwrite", self._fd_paths.get(fd))
        return super().pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        self._check("fdatasync", self._fd_paths.get(fd))

    def fsync(self, fd: int) -> None:
        self._check("fsync", self._fd_paths.get(fd))

    def ftruncate(self, fd: int, length: int) -> None:
        self._check("ftruncate", self._fd_paths.get(fd))
        super().ftruncate(fd, length)

    def close(self, fd: int) -> None:
        self._fd_paths.pop(fd, None)
        super().close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        self._check("replace", dst)
        super().replace(src, dst)

    def unlink(self, path: Path) -> None:
        self._check("unlink", path)
        super().unlink(path)


class SimulatedDisk(FileLayer):
    """Tracks durable images and can cut the power (see the module docstring).

    ``crash_after``: cut the power at the N-th mutating call (that call does not happen).
    """

    def __init__(self, rng: random.Random, *, crash_after: int | None = None) -> None:
        self._rng = rng
        self._lock = threading.RLock()
        self._fd_paths: dict[int, Path] = {}
        self._durable: dict[Path, bytes] = {}
        self._dirty: set[Path] = set()
        self.crash_after = crash_after
        self.calls = 0
        self.dead = False

    def _tick(self) -> None:
        if self.dead:
            raise SimulatedCrash
        self.calls += 1
        if self.crash_after is not None and self.calls >= self.crash_after:
            self.cut_power()
            raise SimulatedCrash

    def _touch(self, path: Path) -> None:
        if path not in self._durable:
            self._durable[path] = _read(path) if path.exists() else b""
        self._dirty.add(path)

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        with self._lock:
            self._tick()
            if path not in self._durable:
                self._durable[path] = _read(path) if path.exists() else b""
            fd = super().open(path, flags, mode)
            self._fd_paths[fd] = path
            return fd

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        with self._lock:
            self._tick()
            self._touch(self._fd_paths[fd])
            return super().pwrite(fd, data, offset)

    def ftruncate(self, fd: int, length: int) -> None:
        with self._lock:
            self._tick()
            self._touch(self._fd_paths[fd])
            super().ftruncate(fd, length)

    def fdatasync(self, fd: int) -> None:
        self._sync(fd)

    def fsync(self, fd: int) -> None:
        self._sync(fd)

    def _sync(self, fd: int) -> None:
        with self._lock:
            self._tick()
            path = self._fd_paths.get(fd)
            if path is not None and path.exists():
                self._durable[path] = _read(path)
                self._dirty.discard(path)

    def fsync_dir(self, path: Path) -> None:
        with self._lock:
            self._tick()

    def close(self, fd: int) -> None:
        with self._lock:
            self._fd_paths.pop(fd, None)
            os.close(fd)

    def replace(self, src: Path, dst: Path) -> None:
        with self._lock:
            self._tick()
            super().replace(src, dst)
            self._durable[dst] = self._durable.pop(src, b"")
            if src in self._dirty:
                self._dirty.discard(src)
                self._dirty.add(dst)
            else:
                self._dirty.discard(dst)
            for fd, path in self._fd_paths.items():
                if path == src:
                    self._fd_paths[fd] = dst

    def unlink(self, path: Path) -> None:
        with self._lock:
            self._tick()
            super().unlink(path)
            self._durable.pop(path, None)
            self._dirty.discard(path)

    def mkdir(self, path: Path) -> None:
        with self._lock:
            self._tick()
            super().mkdir(path)

    def rmdir(self, path: Path) -> None:
        with self._lock:
            self._tick()
            super().rmdir(path)

    def cut_power(self) -> None:
        """Lose, per dirty file, a random part of what was not synced; then die."""
        with self._lock:
            if self.dead:
                return
            self.dead = True
            for path in sorted(self._dirty):
                if path.exists():
                    _write(path, self._after_crash(_read(path), self._durable.get(path, b"")))
            self._dirty.clear()

    def _after_crash(self, current: bytes, durable: bytes) -> bytes:
        first_change = _first_difference(current, durable)
        if first_change is None:
            return current
        cut = self._rng.randint(first_change, len(current))
        result = bytearray(current[:cut] + durable[cut:])
        torn_from = max(first_change, cut - 512)
        if cut > torn_from and self._rng.random() < 0.5:
            garbage = self._rng.randbytes(cut - torn_from)
            result[torn_from:cut] = garbage if self._rng.random() < 0.5 else bytes(len(garbage))
        return bytes(result)


def _first_difference(a: bytes, b: bytes) -> int | None:
    """The first offset where ``a`` and ``b`` differ (including length), None if equal."""
    if a == b:
        return None
    limit = min(len(a), len(b))
    low, high = 0, limit
    while low < high:  # binary search on prefix equality: files can be megabytes
        middle = (low + high) // 2
        if a[: middle + 1] == b[: middle + 1]:
            low = middle + 1
        else:
            high = middle
    return low


def _read(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _write(path: Path, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.write(data)
        handle.truncate(len(data))


def flip_bit(path: Path, bit: int) -> None:
    """Flip bit number ``bit`` (0 = lowest bit of byte 0) of ``path`` in place."""
    with open(path, "r+b") as handle:
        handle.seek(bit // 8)
        byte = handle.read(1)[0]
        handle.seek(bit // 8)
        handle.write(bytes([byte ^ (1 << (bit % 8))]))
