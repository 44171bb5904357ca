"""``SchemaStore``: the schemas producers declare (``Schema`` protobuf bytes, opaque here), one
version list per topic; versions are 8-byte big-endian integers on the wire.

``FileSchemaStore`` (standalone) keeps one small JSON file per topic under
``<dataDir>/metadata/schemas/`` (``{"topic": name, "versions": [base64, ...]}``, named by the
SHA-256 of the topic's name, so any name fits a file name), written and serialized in a disk
thread: a new version costs one topic's file, not a rewrite of every topic's schemas on the
loop. The single ``schemas.json`` of earlier builds is split into these files at start.
``broker/metadata/etcd_schemas.py`` keeps one etcd key per topic (cluster mode).

Whether a schema new to the topic may join its versions is the caller's decision
(``broker/schemas/registry.py``: Pulsar's compatibility strategies): ``put`` takes an ``Admit``
that sees the stored versions and names the one the schema already is, or None to append it, or
raises ``IncompatibleSchema``. It runs where the append happens (synchronously on the loop for
the files, inside the compare-and-swap for etcd), so two producers cannot both pass a check
against a version list that one of them is about to change.

A topic keeps at most ``MAX_SCHEMA_VERSIONS`` versions: a producer declaring one more distinct
schema is refused with ``IncompatibleSchema`` (the error Pulsar's producers get for a schema the
registry does not accept), so a client cycling through schemas cannot grow the registry
without bound. Deleting the topic deletes its schemas.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import struct
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from broker.errors import IncompatibleSchema
from broker.metadata.document import JsonDocument
from broker.storage.files import OsFileLayer

log = logging.getLogger(__name__)

_VERSION = struct.Struct(">q")
#: Distinct schemas kept per topic (see the module docstring).
MAX_SCHEMA_VERSIONS = 100


#: Sees a topic's stored versions (oldest first) when a schema not stored byte for byte
#: arrives: the index of the version it already is, or None to append it; or raises.
Admit = Callable[[list[bytes]], int | None]


class SchemaStore(Protocol):
    """Schemas declared by producers: topic -> serialized ``Schema`` versions."""

    async def put(self, topic: str, schema: bytes, admit: Admit | None = None) -> bytes: ...

    def get(self, topic: str, version: bytes | None) -> tuple[bytes, bytes] | None: ...

    def versions(self, topic: str) -> list[bytes]: ...

    async def delete(self, topic: str) -> None: ...


def encode_schema(schema: bytes) -> str:
    return base64.b64encode(schema).decode()


def decode_versions(versions: list[str]) -> list[bytes]:
    return [_decoded(v) for v in versions]


@lru_cache(maxsize=4096)
def _decoded(encoded: str) -> bytes:
    """A stored version's bytes, decoded once: every schema new to a topic is judged against
    all of its versions (up to ``MAX_SCHEMA_VERSIONS``), on the loop."""
    return base64.b64decode(encoded)


def with_version(
    topic: str, versions: list[str], encoded: str, admit: Admit | None = None
) -> tuple[list[str], int]:
    """``versions`` with ``encoded`` appended unless present or admitted as an existing one,
    and its index; IncompatibleSchema past the limit (or from ``admit``)."""
    if encoded in versions:
        return versions, versions.index(encoded)
    existing = admit(decode_versions(versions)) if admit is not None else None
    if existing is not None:
        return versions, existing
    if len(versions) >= MAX_SCHEMA_VERSIONS:
        raise IncompatibleSchema(
            f"Topic {topic} already has {MAX_SCHEMA_VERSIONS} schema versions, the most kept "
            "per topic; use one of them, or delete the topic to start afresh"
        )
    return [*versions, encoded], len(versions)


def version_bytes(index: int) -> bytes:
    return _VERSION.pack(index)


def pick_version(versions: list[str], version: bytes | None) -> tuple[bytes, bytes] | None:
    """The schema ``version`` names (the latest when empty) and its version, None if unknown."""
    if not versions:
        return None
    index = len(versions) - 1
    if version:
        index = _VERSION.unpack(version.rjust(8, b"\0")[-8:])[0]
        if not 0 <= index < len(versions):
            return None
    return base64.b64decode(versions[index]), _VERSION.pack(index)


class FileSchemaStore:
    """Schemas in one file per topic (see the module docstring)."""

    def __init__(self, directory: Path, *, split_legacy: bool = True) -> None:
        self._directory = directory / "schemas"
        self._schemas: dict[str, list[str]] = {}
        self._documents: dict[str, JsonDocument] = {}
        for path in sorted(self._directory.glob("*.json")) if self._directory.is_dir() else ():
            loaded = JsonDocument(path).load()
            self._schemas[str(loaded["topic"])] = [str(v) for v in loaded["versions"]]
        legacy = JsonDocument(directory / "schemas.json").load()
        for topic, versions in legacy.items():
            self._schemas.setdefault(topic, [str(v) for v in versions])
        if legacy and split_legacy:
            self._split_legacy_document(directory / "schemas.json", legacy)

    def all_versions(self) -> list[tuple[str, list[str]]]:
        """Every topic's versions (base64), for the import into etcd."""
        return sorted((topic, list(versions)) for topic, versions in self._schemas.items())

    def _split_legacy_document(self, path: Path, legacy: dict[str, object]) -> None:
        """Earlier builds kept every topic in ``schemas.json``: write each topic's file (at
        start, before serving), then remove the old document. A crash in between repeats it."""
        for topic in legacy:
            self._document(topic).write_now(_payload(topic, tuple(self._schemas[topic])))
        path.unlink(missing_ok=True)
        OsFileLayer().fsync_dir(path.parent)
        log.info("schemas: split %s into one file per topic (%d topics)", path, len(legacy))

    def _document(self, topic: str) -> JsonDocument:
        document = self._documents.get(topic)
        if document is None:
            name = hashlib.sha256(topic.encode()).hexdigest()
            document = self._documents[topic] = JsonDocument(self._directory / f"{name}.json")
        return document

    async def put(self, topic: str, schema: bytes, admit: Admit | None = None) -> bytes:
        """Store ``schema`` (unless ``admit`` names an existing version) and return its
        version, once that version is durable."""
        encoded = encode_schema(schema)
        versions = self._schemas.get(topic, [])
        updated, index = with_version(topic, versions, encoded, admit)
        document = self._document(topic)
        if updated is not versions:
            self._schemas[topic] = updated
        elif document.saved:
            return version_bytes(index)
        # New, or added by a put still writing: wait until it is durable. The snapshot is a
        # tuple, so the disk thread serializes it while the loop goes on.
        await document.save_serialized_off_loop(lambda: _payload(topic, tuple(updated)))
        return version_bytes(index)

    def get(self, topic: str, version: bytes | None) -> tuple[bytes, bytes] | None:
        return pick_version(self._schemas.get(topic, []), version)

    def versions(self, topic: str) -> list[bytes]:
        """Every stored version of ``topic``, oldest first."""
        return decode_versions(self._schemas.get(topic, []))

    async def delete(self, topic: str) -> None:
        # The document object stays: its version counter orders this removal after any write
        # of the topic still running.
        if self._schemas.pop(topic, None) is not None:
            await self._document(topic).remove()


def _payload(topic: str, versions: tuple[str, ...]) -> bytes:
    return json.dumps({"topic": topic, "versions": list(versions)}, indent=1).encode()
