"""The compiled ``batch_columns`` against the reference on generated batch payloads.

Canonical batches (what clients write: keys, properties, event times, sequence ids, null
values) and hand-written records: SingleMessageMetadata fields out of order, repeated, of the
wrong wire type, unknown, over-long varints, KeyValues missing a field or not UTF-8, sizes that
lie, truncated and trailing bytes, record counts that disagree. Each result must be equal, each
error equal in class and message.
"""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import _speedups
from protocol.batch import SingleMessage, encode_batch
from protocol.batch_columns import BatchColumns, py_batch_columns
from protocol.errors import RemoteProtocolError
from tests.protocol.speedups_wire import U64, field_bytes, fields_of, ints, texts

compiled = _speedups.bind_columns(BatchColumns, py_batch_columns)

SINGLE_FIELDS = {1: 2, 2: 2, 3: 0, 4: 0, 5: 0, 6: 0, 7: 2, 8: 0, 9: 0, 10: 0}
key_values = st.one_of(
    fields_of({1: 2, 2: 2}, texts),
    st.tuples(texts, texts).map(lambda kv: field_bytes(1, 2, kv[0]) + field_bytes(2, 2, kv[1])),
)


@st.composite
def hand_records(draw: st.DrawFn) -> bytes:
    """One record: a header of generated fields (mostly with a payload size first) and data."""
    data = draw(st.binary(max_size=12))
    header = draw(fields_of(SINGLE_FIELDS, st.one_of(texts, key_values)))
    size = len(data) if draw(st.integers(0, 9)) else draw(ints)
    if draw(st.integers(0, 9)):
        header = field_bytes(3, 0, size) + header
    header_size = len(header) if draw(st.integers(0, 19)) else draw(st.integers(0, 40))
    return struct.pack(">I", header_size) + header + data


records = st.builds(
    SingleMessage,
    payload=st.binary(max_size=30),
    properties=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
    partition_key=st.one_of(st.none(), st.text(max_size=5)),
    event_time=st.one_of(st.just(0), st.integers(0, U64)),
    sequence_id=st.one_of(st.none(), st.integers(0, U64)),
    null_value=st.booleans(),
)


def outcome(columns: Any, payload: bytes, count: int, first: int) -> Any:
    try:
        return columns(payload, count, first)
    except RemoteProtocolError as exc:
        return (type(exc), str(exc))


@settings(max_examples=400)
@given(st.lists(records, min_size=1, max_size=10), st.integers(-(1 << 64), U64))
def test_canonical_batches(batch: list[SingleMessage], first: int) -> None:
    payload = encode_batch(batch)
    assert outcome(compiled, payload, len(batch), first) == outcome(
        py_batch_columns, payload, len(batch), first
    )


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(hand_records(), min_size=0, max_size=6),
    st.integers(-1, 8),
    st.binary(max_size=3),
    st.integers(0, U64),
)
def test_hand_written_records(parts: list[bytes], count: int, tail: bytes, first: int) -> None:
    payload = b"".join(parts) + tail
    assert outcome(compiled, payload, count, first) == outcome(
        py_batch_columns, payload, count, first
    )


def test_the_package_exports_the_compiled_one_unless_pure() -> None:
    from protocol import _accel, batch_columns

    expected = py_batch_columns if _accel.speedups() is None else _speedups.batch_columns
    assert batch_columns.batch_columns is expected
