"""``SchemaStore``: the schemas producers declare (``Schema`` protobuf bytes, opaque here), one
version list per topic; versions are 8-byte big-endian integers on the wire. One JSON document
(``broker/metadata/document.py``)."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

from broker.metadata.document import JsonDocument

_VERSION = struct.Struct(">q")


class SchemaStore:
    """Schemas declared by producers: topic -> list of serialized ``Schema`` versions."""

    def __init__(self, directory: Path) -> None:
        self._doc = JsonDocument(directory / "schemas.json")
        loaded = self._doc.load()
        self._schemas: dict[str, list[str]] = {k: list(v) for k, v in loaded.items()}

    async def put(self, topic: str, schema: bytes) -> bytes:
        """Store ``schema`` (if new) and return its version, once that version is durable."""
        encoded = base64.b64encode(schema).decode()
        versions = self._schemas.setdefault(topic, [])
        if encoded in versions:
            if not self._doc.saved:  # maybe added by a put still writing: wait for it
                await self._doc.save(self._schemas)
            return _VERSION.pack(versions.index(encoded))
        versions.append(encoded)
        await self._doc.save(self._schemas)
        return _VERSION.pack(len(versions) - 1)

    def get(self, topic: str, version: bytes | None) -> tuple[bytes, bytes] | None:
        versions = self._schemas.get(topic)
        if not versions:
            return None
        index = len(versions) - 1
        if version:
            index = _VERSION.unpack(version.rjust(8, b"\0")[-8:])[0]
            if not 0 <= index < len(versions):
                return None
        return base64.b64decode(versions[index]), _VERSION.pack(index)

    async def delete(self, topic: str) -> None:
        if self._schemas.pop(topic, None) is not None:
            await self._doc.save(self._schemas)
