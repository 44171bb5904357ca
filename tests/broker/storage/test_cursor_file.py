"""broker.storage.cursor_file: properties rendered ahead as JSON text (``RenderedProperties``,
issue #26 item 6) are spliced into the cursor document byte for byte as ``json.dumps`` writes
the same dict, read back by the unchanged decoder, and kept by a cursor without being copied
(decoded) on the way to the disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.storage import Ledger, LedgerConfig, Position, cursor_file
from broker.storage.cursor_file import (
    CursorState,
    RenderedProperties,
    decode_cursor_document,
    decode_cursor_state,
    encode_cursor_document,
)
from broker.storage.files import read_file
from broker.storage.ranges import EntryRange
from protocol.enums import InitialPosition
from tests.broker.storage.faults import InlineExecutor, NoSyncLayer

names = st.text(st.characters(codec="utf-8"), max_size=12)
values = st.integers(-(2**200), 2**200)


def _members(properties: dict[str, int]) -> bytes:
    return json.dumps(properties, separators=(",", ":"))[1:-1].encode()


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(names, values, max_size=8),
    st.dictionaries(names, values, max_size=4),
    names,
    st.lists(st.integers(0, 1000), max_size=6, unique=True),
    st.dictionaries(st.integers(0, 50), st.lists(st.integers(0, 2**64 - 1), max_size=3)),
)
def test_rendered_properties_give_the_documents_bytes_of_the_dict(
    rendered: dict[str, int],
    rest: dict[str, int],
    name: str,
    deleted: list[int],
    batch: dict[int, list[int]],
) -> None:
    """Any names and values, other members around them, bounds applied: the spliced document is
    the one the dict gives, and decodes to the same state."""
    rest = {key: value for key, value in rest.items() if key not in rendered}
    plain = CursorState(
        name,
        Position(3, 9),
        properties={**rendered, **rest},
        ranges=[EntryRange(3, 2 * e + 11, 2 * e + 11) for e in sorted(deleted)],
        batch={Position(3, 20 + e): words for e, words in batch.items()},
    )
    spliced = CursorState(
        plain.name,
        plain.mark_delete,
        properties=RenderedProperties(_members(rendered), len(rendered), rest),
        ranges=plain.ranges,
        batch=plain.batch,
    )
    document = encode_cursor_document(plain, 3, 2)
    assert encode_cursor_document(spliced, 3, 2) == document
    assert decode_cursor_document(document, Path("c")).properties == plain.properties


def test_rendered_properties_read_as_the_mapping_they_stand_for() -> None:
    """Length without decoding; items in the document's order, the rendered ones first."""
    properties = RenderedProperties(b'"d:aa":1,"d:bb":2', 2, {"v": 2, "h:1:2": 5})
    assert len(properties) == 4
    assert properties._decoded is None  # a cursor asks whether there are any: no decode
    assert list(properties.items()) == [("d:aa", 1), ("d:bb", 2), ("v", 2), ("h:1:2", 5)]
    assert properties == {"d:aa": 1, "d:bb": 2, "v": 2, "h:1:2": 5}
    assert properties["d:bb"] == 2
    with pytest.raises(KeyError):
        properties["d:cc"]
    empty = RenderedProperties(b"", 0, {})
    assert not empty
    assert dict(empty) == {}
    assert empty.json_members() == b""
    assert RenderedProperties(b"", 0, {"v": 2}).json_members() == b'"v":2'


def test_rendered_properties_render_once_when_first_needed() -> None:
    """Text given as a function is rendered by the first use (the cursor write, not whoever made
    the properties), once; asking the length renders nothing."""
    calls: list[int] = []

    def render() -> bytes:
        calls.append(1)
        return b'"d:aa":1'

    properties = RenderedProperties(render, 1, {"v": 2})
    assert len(properties) == 2
    assert calls == []
    state = CursorState("c", Position(1, 1), properties=properties)
    document = encode_cursor_document(state, 1, 1)
    assert encode_cursor_document(state, 1, 1) == document
    assert properties == {"d:aa": 1, "v": 2}
    assert calls == [1]
    plain = CursorState("c", Position(1, 1), properties={"d:aa": 1, "v": 2})
    assert document == encode_cursor_document(plain, 1, 1)


def test_a_cursor_keeps_rendered_properties_as_they_are_and_persists_them(
    tmp_path: Path,
) -> None:
    """mark_delete and the persisted snapshot hold the object itself (a copy would decode 100k
    items on the loop); the file holds the document the dict would have written, and a reopened
    ledger reads it back as a plain dict."""
    config = LedgerConfig(preallocate_bytes=0)
    ledger = Ledger.open(tmp_path, config, file_layer=NoSyncLayer(), preallocator=InlineExecutor())
    last = ledger.append(b"e")
    ledger.flush()
    cursor = ledger.open_cursor("magnetar.idempotency", InitialPosition.Earliest)
    keys = {f"d:{i:032x}": i << 130 for i in range(1000)}
    properties = RenderedProperties(_members(keys), len(keys), {"v": 2})
    cursor.mark_delete(last, properties=properties)
    state = cursor.snapshot()
    assert state.properties is properties
    assert properties._decoded is None
    cursor.persist()
    path = cursor_file(tmp_path, "magnetar.idempotency")
    written = decode_cursor_state(read_file(path), path)
    expected = CursorState(cursor.name, last, properties={**keys, "v": 2})
    assert encode_cursor_document(written, 100, 100) == encode_cursor_document(expected, 100, 100)
    ledger.close()
    reopened = Ledger.open(
        tmp_path, config, file_layer=NoSyncLayer(), preallocator=InlineExecutor()
    )
    cursor = reopened.open_cursor("magnetar.idempotency", InitialPosition.Earliest)
    assert cursor.mark_delete_position == last
    assert cursor.properties == {**keys, "v": 2}
    reopened.close()
