"""Cut a damaged ledger to its longest valid prefix: the storage side of ``repair-topic``.

``Ledger.open`` refuses a ledger whose sealed segments or metadata are damaged and drops
nothing. This module is the way forward it leaves, and it only ever runs on an operator's
command: ``plan_repair`` reads the directory and says exactly what a repair would keep and drop
(the dry run); ``apply_repair`` carries such a plan out.

**Longest valid prefix.** The segments ``ledger.meta`` lists, in ledger-id order, are checked as
``open`` checks them (file present, header, size, whole-region crc). The first that fails is
scanned record by record and keeps the records before its first bad one. Everything after that
record is dropped: the rest of that segment, every later sealed segment and any unsealed segment
(the previous active one), even when those are intact. Consumers, readers and PIP-6 replay rely
on a log without holes, and a prefix is the one state the topic is known to have been in.

**Nothing is destroyed.** Before anything is cut, dropped bytes go to a quarantine folder next to
a manifest (``repair.json``, the plan): later segment files are moved there whole, and the tail
of the damaged segment (from its first bad record) is copied there.

**Order** (each step durable before the next): quarantine folder and manifest; copy of the damaged
tail; later segments moved (both directories fsynced, or a power loss could bring the files back
to be deleted as trim leftovers); the placeholder; the damaged segment truncated and fsynced;
``ledger.meta`` rewritten atomically. Only the last step makes the ledger open again, so a crash
anywhere before it leaves a ledger that ``open`` still refuses, and planning again finishes the
job (segments already moved are reported as missing).

**Ledger ids stay reserved.** ``open`` starts its next ledger after the highest id it knows. If
the dropped segments had higher ids than every kept one, the highest of them is kept as an empty
sealed segment (a header-only file, a *placeholder*): a position a client or cursor still
remembers from the dropped data can never name new data.

**Cursors are not rewritten.** A cursor whose mark-delete lies beyond the new end is pulled back
by the next ``open`` (``Cursor._clamp``, as after a power loss without fsync), which also makes
PIP-6 rebuild its state by replaying the kept entries (``was_clamped``); clamping here would hide
that from it. The plan lists these cursors.

**Reported, not repaired:** a damaged ``ledger.meta`` (the sealed list, entry counts and crcs are
then unknown, so there is no prefix to keep) and damaged cursor files (they hold subscription
state that no cut can restore). The dedup snapshot is the exception the broker already handles:
it is set aside and rebuilt at load.

The plan is ``broker.storage.repair_plan``, its making ``broker.storage.repair_planner``;
both are importable from here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from broker.storage.files import (
    FileLayer,
    OsFileLayer,
    atomic_write,
    ensure_directory,
    segment_file_name,
    write_all,
)
from broker.storage.ledger_meta_file import (
    LedgerMetadata,
    SealedLedger,
    current_metadata_path,
    encode_metadata,
)
from broker.storage.repair_plan import (
    CursorNote,
    Damage,
    DroppedEntries,
    RepairPlan,
    Truncation,
)
from broker.storage.repair_planner import plan_repair
from broker.storage.segment import HEADER_SIZE, encode_segment_header

__all__ = [
    "MANIFEST_NAME",
    "CursorNote",
    "Damage",
    "DroppedEntries",
    "RepairError",
    "RepairPlan",
    "Truncation",
    "apply_repair",
    "plan_repair",
]

MANIFEST_NAME = "repair.json"
_COPY_CHUNK = 8 << 20


class RepairError(Exception):
    """The ledger cannot be repaired by cutting (see ``RepairPlan.blocking``)."""


def apply_repair(
    plan: RepairPlan,
    quarantine: Path,
    *,
    file_layer: FileLayer | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Carry out ``plan`` (see the module docstring for the order of the steps).

    The caller must hold the directory's ``LedgerLock`` from planning to the end, so that no
    broker opens the ledger in between. ``quarantine`` must not exist yet (one per repair).

    Raises:
        RepairError: the plan cannot be carried out (damaged ``ledger.meta``) or has nothing
            to do.
        OSError: a file operation failed; the ledger is then still refused by ``open`` and
            planning again continues where this stopped.
    """
    if plan.blocking:
        raise RepairError(f"cannot repair {plan.directory}: {plan.blocking[0]}")
    if not plan.needs_repair or plan.metadata is None:
        raise RepairError(f"nothing to repair in {plan.directory}")
    layer = file_layer or OsFileLayer()
    ensure_directory(layer, quarantine)
    atomic_write(layer, quarantine / MANIFEST_NAME, _manifest(plan, clock))
    if plan.truncate is not None:
        _copy_tail(layer, plan.truncate, quarantine)
    for path in plan.move:
        layer.replace(path, quarantine / path.name)
    if plan.move:
        layer.fsync_dir(quarantine)
        layer.fsync_dir(plan.directory)
    sealed = list(plan.sealed)
    if plan.placeholder is not None:
        sealed.append(_write_placeholder(layer, plan.directory, plan.placeholder, clock))
    if plan.truncate is not None:
        _truncate(layer, plan.truncate)
    repaired = LedgerMetadata(
        ledgers=tuple(sealed),
        properties=dict(plan.metadata.properties),
        last_trimmed=plan.metadata.last_trimmed,
    )
    # The current file (cluster mode: the last owner's epoch), so the repair is what loads.
    target = current_metadata_path(plan.directory)
    atomic_write(layer, target, encode_metadata(repaired))


def _manifest(plan: RepairPlan, clock: Callable[[], float]) -> bytes:
    document = {"repairedAt": clock(), "plan": plan.to_json()}
    return json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"


def _copy_tail(layer: FileLayer, cut: Truncation, quarantine: Path) -> None:
    """Copy the bytes the truncation removes to ``<name>.from-<offset>`` in the quarantine."""
    if cut.size <= cut.new_size:
        return
    target = quarantine / f"{cut.path.name}.from-{cut.new_size}"
    source = os.open(cut.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fd = layer.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            offset = cut.new_size
            while offset < cut.size:
                chunk = os.pread(source, min(_COPY_CHUNK, cut.size - offset), offset)
                if not chunk:
                    break
                write_all(layer, fd, chunk, offset - cut.new_size)
                offset += len(chunk)
            layer.fsync(fd)
        finally:
            layer.close(fd)
    finally:
        os.close(source)
    layer.fsync_dir(quarantine)


def _write_placeholder(
    layer: FileLayer, directory: Path, ledger_id: int, clock: Callable[[], float]
) -> SealedLedger:
    """A header-only segment file for ``ledger_id``, durable, and its metadata row."""
    path = directory / segment_file_name(ledger_id)
    atomic_write(layer, path, encode_segment_header(ledger_id))
    return SealedLedger(ledger_id, 0, HEADER_SIZE, 0, int(clock() * 1000))


def _truncate(layer: FileLayer, cut: Truncation) -> None:
    fd = layer.open(cut.path, os.O_RDWR)
    try:
        layer.ftruncate(fd, cut.new_size)
        layer.fsync(fd)
    finally:
        layer.close(fd)
