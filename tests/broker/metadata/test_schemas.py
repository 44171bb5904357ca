"""broker.metadata.schemas: one file per topic, the old single document split at start, and
the bound on versions per topic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.errors import IncompatibleSchema
from broker.metadata.schemas import MAX_SCHEMA_VERSIONS, FileSchemaStore

TOPIC = "persistent://acme/orders/t"


async def test_each_topic_has_its_own_file(tmp_path: Path) -> None:
    store = FileSchemaStore(tmp_path)
    await store.put(TOPIC, b"a")
    await store.put(TOPIC + "2", b"b")
    files = sorted((tmp_path / "schemas").iterdir())
    assert [json.loads(f.read_text())["topic"] for f in files] == sorted([TOPIC, TOPIC + "2"])
    await store.delete(TOPIC)
    assert len(list((tmp_path / "schemas").iterdir())) == 1


async def test_a_topic_keeps_at_most_the_bound_of_versions(tmp_path: Path) -> None:
    store = FileSchemaStore(tmp_path)
    for index in range(MAX_SCHEMA_VERSIONS):
        assert await store.put(TOPIC, b"v%d" % index) == index.to_bytes(8, "big")
    with pytest.raises(IncompatibleSchema, match="schema versions"):
        await store.put(TOPIC, b"one too many")
    assert await store.put(TOPIC, b"v7") == (7).to_bytes(8, "big")  # known ones still work
    assert FileSchemaStore(tmp_path).get(TOPIC, None) == (
        b"v%d" % (MAX_SCHEMA_VERSIONS - 1),
        (MAX_SCHEMA_VERSIONS - 1).to_bytes(8, "big"),
    )


def test_the_single_document_of_earlier_builds_is_split(tmp_path: Path) -> None:
    legacy = {TOPIC: ["YQ==", "Yg=="]}  # b"a", b"b" as earlier builds wrote them
    (tmp_path / "schemas.json").write_text(json.dumps(legacy, sort_keys=True, indent=1))
    assert FileSchemaStore(tmp_path).get(TOPIC, None) == (b"b", (1).to_bytes(8, "big"))
    assert not (tmp_path / "schemas.json").exists()
    assert FileSchemaStore(tmp_path).get(TOPIC, bytes(8)) == (b"a", bytes(8))


async def test_admit_names_an_existing_version_or_refuses_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    store = FileSchemaStore(tmp_path)
    await store.put(TOPIC, b"first")
    seen: list[list[bytes]] = []

    def same_as_first(versions: list[bytes]) -> int | None:
        seen.append(versions)
        return 0

    assert await store.put(TOPIC, b"first, spelled differently", same_as_first) == bytes(8)
    assert seen == [[b"first"]]

    def refuse(versions: list[bytes]) -> int | None:
        raise IncompatibleSchema("no")

    with pytest.raises(IncompatibleSchema):
        await store.put(TOPIC, b"second", refuse)
    assert await store.put(TOPIC, b"first", refuse) == bytes(8)  # stored bytes: not asked
    assert FileSchemaStore(tmp_path).versions(TOPIC) == [b"first"]
