"""The compiled ACK of whole entries against the reference (and against ``ack`` itself)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol import _speedups, commands
from protocol.commands.consumers import py_ack_entries
from protocol.ids import MessageId
from tests.protocol.speedups_wire import EDGE_INTS, U64

ids = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-(1 << 63), U64))
signed = st.one_of(
    st.sampled_from([0, 1, -1, (1 << 63) - 1, -(1 << 63)]), st.integers(-(1 << 63), (1 << 63) - 1)
)


@given(ids, st.lists(st.tuples(ids, ids), max_size=300))
def test_same_bytes_as_the_reference(consumer_id: int, entries: list[tuple[int, int]]) -> None:
    assert _speedups.ack_entries(consumer_id, entries) == py_ack_entries(consumer_id, entries)


@given(ids, st.lists(st.tuples(signed, signed), max_size=50))
def test_same_bytes_as_an_ack_of_message_ids(
    consumer_id: int, entries: list[tuple[int, int]]
) -> None:
    """What a consumer groups as entry keys reads on the wire as the ids ``ack`` would send."""
    as_ids = [MessageId(ledger, entry) for ledger, entry in entries]
    assert commands.ack_entries(consumer_id, entries) == commands.ack(consumer_id, as_ids)
