"""``LedgerLock``: one byte-range lock per topic in a per-namespace file; a broker's locks share
one descriptor (``LockTable``), and still exclude the repair tool's, even in this process."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from broker.storage.lock import LOCKS_FILE_NAME, LedgerLock, LockTable, first_lock
from protocol.topic_name import folder_name, part_from_folder_name


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def topic_dirs(namespace: Path, count: int) -> list[Path]:
    dirs = [namespace / f"topic-{i}" for i in range(count)]
    for directory in dirs:
        directory.mkdir(parents=True)
    return dirs


def test_a_table_holds_many_locks_on_one_descriptor(tmp_path: Path) -> None:
    table = LockTable()
    dirs = topic_dirs(tmp_path / "ns", 500)
    before = descriptors()
    locks = [LedgerLock.try_acquire(d, table) for d in dirs]
    assert all(lock is not None and lock.held for lock in locks)
    assert descriptors() - before == 1
    assert table.descriptors() == 1
    assert (tmp_path / "ns" / LOCKS_FILE_NAME).exists()
    for lock in locks:
        assert lock is not None
        lock.release()
    assert table.descriptors() == 0
    assert descriptors() == before


def test_a_shared_lock_excludes_a_private_one_and_is_given_back(tmp_path: Path) -> None:
    table = LockTable()
    first, second = topic_dirs(tmp_path / "ns", 2)
    held = LedgerLock.try_acquire(first, table)
    assert held is not None
    assert LedgerLock.try_acquire(first) is None  # the repair tool's view
    other = LedgerLock.try_acquire(second)  # another topic of the namespace is free
    assert other is not None
    other.release()
    held.release()
    held.release()  # idempotent
    again = LedgerLock.try_acquire(first)
    assert again is not None
    assert LedgerLock.try_acquire(first, table) is None  # and the other way round
    again.release()


def test_namespaces_have_their_own_locks_file(tmp_path: Path) -> None:
    table = LockTable()
    (one,) = topic_dirs(tmp_path / "a", 1)
    (two,) = topic_dirs(tmp_path / "b", 1)
    locks = [LedgerLock.try_acquire(one, table), LedgerLock.try_acquire(two, table)]
    assert table.descriptors() == 2
    for lock in locks:
        assert lock is not None
        lock.release()


def test_no_topic_folder_can_take_the_name_of_the_locks_file() -> None:
    """A topic may be called ``ledger.locks``: its folder must not be the namespace's lock
    table (and a listing of the namespace must not take the table for a topic), on a
    case-insensitive file system too."""
    for spelling in (LOCKS_FILE_NAME, LOCKS_FILE_NAME.lower(), LOCKS_FILE_NAME.upper()):
        assert part_from_folder_name(spelling) is None
    assert folder_name("ledger.locks") != LOCKS_FILE_NAME


class _Holder:
    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock: threading.Lock | None = None


def test_first_lock_makes_one_lock_even_when_threads_race() -> None:
    """Made on first use (issue #26), once: every thread asking at once gets the same lock."""
    holders = [_Holder() for _ in range(200)]
    start = threading.Barrier(4)
    seen: list[list[threading.Lock]] = [[] for _ in range(4)]

    def ask(index: int) -> None:
        start.wait()
        seen[index].extend(h._lock or first_lock(h, "_lock") for h in holders)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(1, 4):
        assert all(a is b for a, b in zip(seen[0], seen[index], strict=True))
    assert all(h._lock is seen[0][i] for i, h in enumerate(holders))
    assert len({id(lock) for lock in seen[0]}) == len(holders)
    held = holders[0]._lock
    assert held is not None
    with held:  # a real lock: a second acquire would block
        assert not held.acquire(blocking=False)
