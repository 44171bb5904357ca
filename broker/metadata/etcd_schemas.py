"""``EtcdSchemaStore``: schemas as etcd keys (cluster mode), one per topic
(``schemas/<t>/<ns>/<domain>/<topic>`` = ``{"versions": [base64 Schema, ...]}``), so a new
version is one compare-and-swap on that topic's key; bounded as ``broker/metadata/schemas.py``
says."""

from __future__ import annotations

from typing import Any

from broker.metadata.layout import MetadataKeys
from broker.metadata.mirror import MetadataMirror
from broker.metadata.schemas import (
    Admit,
    decode_versions,
    encode_schema,
    pick_version,
    version_bytes,
    with_version,
)


class EtcdSchemaStore:
    """The ``SchemaStore`` of ``broker/metadata/schemas.py`` over a ``MetadataMirror``."""

    def __init__(self, mirror: MetadataMirror, keys: MetadataKeys) -> None:
        self._mirror = mirror
        self._keys = keys

    async def put(self, topic: str, schema: bytes, admit: Admit | None = None) -> bytes:
        encoded = encode_schema(schema)
        index = 0

        # Runs again on every compare-and-swap retry: ``admit`` judges the versions the swap
        # is about to replace, so a schema another broker added meanwhile is checked against.
        def add(current: dict[str, Any] | None) -> dict[str, Any]:
            nonlocal index
            versions = [] if current is None else list(current["versions"])
            updated, index = with_version(topic, versions, encoded, admit)
            return {"versions": updated}

        await self._mirror.update(self._keys.schema(topic), add)
        return version_bytes(index)

    def get(self, topic: str, version: bytes | None) -> tuple[bytes, bytes] | None:
        stored = self._mirror.get(self._keys.schema(topic))
        return None if stored is None else pick_version(list(stored["versions"]), version)

    def versions(self, topic: str) -> list[bytes]:
        stored = self._mirror.get(self._keys.schema(topic))
        return [] if stored is None else decode_versions(list(stored["versions"]))

    async def delete(self, topic: str) -> None:
        await self._mirror.update(self._keys.schema(topic), lambda _: None)
