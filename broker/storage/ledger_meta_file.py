"""The ledger metadata file (``ledger.meta``): sealed segments, properties, trim horizon.

It plays the role of Pulsar's ``ManagedLedgerInfo``: the list of closed ledgers with their
entry count, size and close timestamp, plus the ledger properties (``str -> int``, e.g. the
PIP-68 topic epoch). It is a checked file (see ``files``) rewritten atomically, so a crash leaves
the old or the new version and a bit flip is detected.

Invariants:
* A segment listed here is *sealed*: its data is exactly ``data_end`` bytes long (header
  included), holds ``entries`` records and the records region hashes to ``crc``. Any mismatch is
  corruption, never a torn tail.
* A segment file *not* listed here is the (previous) active segment, the only one that may have
  a torn tail. Files with ids at or below ``last_trimmed.ledger_id`` are leftovers of an
  interrupted trim and are deleted.
* ``last_trimmed`` is the last entry of the most recently trimmed segment, so the ledger still
  knows its last position (and never reuses its id) after everything has been trimmed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.storage.errors import CorruptLedgerError
from broker.storage.files import decode_checked, encode_checked
from broker.storage.position import Position

METADATA_FILE_NAME = "ledger.meta"
METADATA_MAGIC = b"MGLM"
_PLAIN_RANK = -1


def metadata_file_name(epoch: int | None) -> str:
    """``ledger.meta`` (standalone) or ``ledger.meta.<epoch>`` (cluster mode's owner epoch).

    Several may exist in a directory used in cluster mode: the one of the highest epoch is the
    ledger's metadata (`current_metadata_path`). Each owner writes only its own name, so a
    former owner that resumes after a pause (past the fence check it passed before pausing)
    rewrites a file nobody reads any more instead of the new owner's.
    """
    return METADATA_FILE_NAME if epoch is None else f"{METADATA_FILE_NAME}.{epoch}"


def metadata_files(directory: Path) -> list[tuple[int, Path]]:
    """``(rank, path)`` of every metadata file in ``directory``, lowest rank first (the plain
    ``ledger.meta`` ranks below every epoch)."""
    found: list[tuple[int, Path]] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if name == METADATA_FILE_NAME:
            found.append((_PLAIN_RANK, directory / name))
        elif name.startswith(METADATA_FILE_NAME + "."):
            suffix = name[len(METADATA_FILE_NAME) + 1 :]
            if suffix.isdigit():
                found.append((int(suffix), directory / name))
    return sorted(found)


def current_metadata_path(directory: Path) -> Path:
    """The metadata file that holds the ledger's state (``ledger.meta`` if there is none)."""
    found = metadata_files(directory)
    return found[-1][1] if found else directory / METADATA_FILE_NAME


@dataclass(frozen=True, slots=True)
class SealedLedger:
    """What is known about a sealed segment without reading it."""

    ledger_id: int
    entries: int
    data_end: int
    crc: int
    sealed_at_ms: int


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    """The decoded content of ``ledger.meta``."""

    ledgers: tuple[SealedLedger, ...] = ()
    properties: dict[str, int] = field(default_factory=dict)
    last_trimmed: Position | None = None


def encode_metadata(meta: LedgerMetadata) -> bytes:
    """Serialise to checked-file bytes."""
    document = {
        "ledgers": [
            [info.ledger_id, info.entries, info.data_end, info.crc, info.sealed_at_ms]
            for info in meta.ledgers
        ],
        "properties": meta.properties,
        "last_trimmed": list(meta.last_trimmed) if meta.last_trimmed is not None else None,
    }
    payload = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    return encode_checked(METADATA_MAGIC, payload)


def decode_metadata(data: bytes, path: Path) -> LedgerMetadata:
    """Parse checked-file bytes; raises ``CorruptLedgerError`` naming ``path`` if damaged."""
    payload = decode_checked(METADATA_MAGIC, data, path)
    try:
        document: dict[str, Any] = json.loads(payload)
        ledgers = tuple(SealedLedger(*map(int, row)) for row in document["ledgers"])
        properties = {str(k): int(v) for k, v in document["properties"].items()}
        trimmed = document["last_trimmed"]
        last_trimmed = Position(int(trimmed[0]), int(trimmed[1])) if trimmed else None
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise CorruptLedgerError(path, 0, f"undecodable metadata: {exc}") from exc
    return LedgerMetadata(ledgers, properties, last_trimmed)
