"""Fencing on shared storage (broker/cluster/fence.py), with two ledgers on one directory: the
former owner (a zombie that does not know it lost the topic) and the new owner."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.cluster.fence import (
    FENCE_FILE,
    FenceCheck,
    LedgerFencedError,
    StaleOwnershipError,
    install_fence,
    read_fence_epoch,
)
from broker.storage import Ledger, LedgerConfig, Position
from broker.storage.ledger_meta_file import metadata_files


def always_valid() -> bool:
    return True


def open_owned(directory: Path, epoch: int, broker: str) -> tuple[Ledger, FenceCheck]:
    directory.mkdir(parents=True, exist_ok=True)
    check = install_fence(directory, epoch, broker, always_valid)  # before reading anything
    ledger = Ledger.open(directory, LedgerConfig(owner_epoch=epoch))  # as BrokerService does
    ledger.set_fence(check)
    return ledger, check


def test_the_fence_records_the_epoch_and_refuses_an_older_owner(tmp_path: Path) -> None:
    assert read_fence_epoch(tmp_path) == 0
    install_fence(tmp_path, 7, "a:1", always_valid)
    assert read_fence_epoch(tmp_path) == 7
    install_fence(tmp_path, 7, "a:1", always_valid)  # the same epoch reloading: fine
    with pytest.raises(StaleOwnershipError):
        install_fence(tmp_path, 6, "b:1", always_valid)
    assert (tmp_path / FENCE_FILE).is_file()


def test_a_zombie_owner_cannot_acknowledge_or_expose_writes_after_takeover(tmp_path: Path) -> None:
    directory = tmp_path / "topic"
    zombie, zombie_check = open_owned(directory, 10, "zombie:1")
    fenced: list[str] = []
    zombie_check.on_fenced = fenced.append
    acknowledged = [zombie.append(f"before-{i}".encode()) for i in range(5)]
    assert zombie.flush() == acknowledged[-1]

    # The zombie appended more, not yet flushed, when the new owner fences and recovers.
    zombie.append(b"late-1")
    owner, _ = open_owned(directory, 11, "owner:1")
    assert [data for _, data in owner.read(Position(0, 0), 100)] == [
        f"before-{i}".encode() for i in range(5)
    ]

    # The zombie's flush writes its bytes, then the check refuses: nothing acknowledged.
    with pytest.raises(LedgerFencedError):
        zombie.flush()
    assert zombie.last_confirmed_position == acknowledged[-1]
    assert len(fenced) == 1
    assert "epoch 11" in fenced[0]
    with pytest.raises(LedgerFencedError):  # sticky, and no roll or property write either
        zombie.set_property("pulsar.topic.epoch", 99)

    owner.append(b"owner-1")
    owner.flush()
    assert [data for _, data in owner.read(Position(0, 0), 100)][-2:] == [b"before-4", b"owner-1"]
    owner.close()
    zombie._abandon()

    # The zombie's late bytes lie beyond the recovered, sealed end: never served after reopen.
    again, _ = open_owned(directory, 12, "third:1")
    stored = [data for _, data in again.read(Position(0, 0), 100)]
    assert stored == [*(f"before-{i}".encode() for i in range(5)), b"owner-1"]
    assert "pulsar.topic.epoch" not in again.properties
    again.close()


def test_an_expired_lease_fences_without_touching_the_file(tmp_path: Path) -> None:
    valid = [True]
    tmp_path.mkdir(exist_ok=True)
    check = install_fence(tmp_path, 3, "a:1", lambda: valid[0])
    ledger = Ledger.open(tmp_path, LedgerConfig())
    ledger.set_fence(check)
    ledger.append(b"kept")
    ledger.flush()
    valid[0] = False  # e.g. the process was paused longer than the lease TTL
    ledger.append(b"refused")
    with pytest.raises(LedgerFencedError):
        ledger.flush()
    assert check.fenced
    assert [data for _, data in ledger.read(Position(0, 0), 10)] == [b"kept"]
    ledger._abandon()


def test_a_former_owner_rewriting_its_metadata_after_the_takeover_changes_nothing(
    tmp_path: Path,
) -> None:
    """The window a fence check cannot close: a zombie that passed its check, paused past the
    takeover and then rewrites the ledger's metadata. It writes its own epoch's file, which no
    load reads any more."""
    directory = tmp_path / "topic"
    zombie, _ = open_owned(directory, 10, "zombie:1")
    zombie.append(b"zombie-1")
    zombie.flush()
    owner, _ = open_owned(directory, 11, "owner:1")
    assert [rank for rank, _ in metadata_files(directory)] == [11]  # adopted, the old removed
    owner.set_property("pulsar.topic.epoch", 5)
    owner.append(b"owner-1")
    owner.flush()
    owner.close()

    zombie.set_fence(None)  # its check passed before the pause: nothing stops the rewrite
    zombie.set_property("pulsar.topic.epoch", 99)
    assert [rank for rank, _ in metadata_files(directory)] == [10, 11]
    zombie._abandon()

    again, _ = open_owned(directory, 12, "third:1")
    assert again.properties["pulsar.topic.epoch"] == 5
    assert [data for _, data in again.read(Position(0, 0), 10)] == [b"zombie-1", b"owner-1"]
    assert [rank for rank, _ in metadata_files(directory)] == [12]
    again.close()


def test_a_standalone_open_takes_over_a_cluster_mode_directory(tmp_path: Path) -> None:
    directory = tmp_path / "topic"
    owned, _ = open_owned(directory, 4, "owner:1")
    owned.set_property("kept", 1)
    owned.append(b"one")
    owned.close()
    plain = Ledger.open(directory, LedgerConfig())  # standalone: the plain ledger.meta again
    assert plain.properties["kept"] == 1
    assert [rank for rank, _ in metadata_files(directory)] == [-1]
    assert [data for _, data in plain.read(Position(0, 0), 10)] == [b"one"]
    plain.close()
