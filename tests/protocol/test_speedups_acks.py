"""The compiled ACK of whole entries against the reference (and against ``ack`` itself), and
the compiled read of a received ACK's ids against the reference."""

from __future__ import annotations

from typing import Any, NamedTuple

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from protocol import _speedups, commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.commands.consumers import py_ack_entries, py_acked_positions
from protocol.ids import MessageId
from tests.protocol.speedups_wire import EDGE_INTS, U64, field_bytes, fields_of, ints

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


# --- acked_positions (what a broker reads from a received ACK) --------------------------------

MESSAGE_ID_FIELDS = {1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 0, 7: 2}
ACK_FIELDS = {1: 0, 2: 0, 3: 2, 4: 0, 5: 2, 6: 0, 7: 0, 8: 0}


class Where(NamedTuple):
    ledger_id: int
    entry_id: int


@st.composite
def message_ids(draw: st.DrawFn) -> bytes:
    """A MessageIdData: canonical (with ack sets, batch fields, a chunk id) or hand-written
    (repeated fields, packed or unpacked ack sets, wrong wire types, unknown fields)."""
    if draw(st.booleans()):
        message_id = pb.MessageIdData(ledgerId=draw(ids) % (1 << 64), entryId=draw(ids) % (1 << 64))
        message_id.ack_set.extend(draw(st.lists(signed, max_size=4)))
        if draw(st.booleans()):
            message_id.batch_index, message_id.batch_size = 3, 10
        if draw(st.integers(0, 5)) == 0:
            message_id.first_chunk_message_id.ledgerId = 1
            message_id.first_chunk_message_id.entryId = 2
        return message_id.SerializePartialToString()
    head = field_bytes(1, 0, draw(ints)) + field_bytes(2, 0, draw(ints))
    return head + draw(fields_of(MESSAGE_ID_FIELDS, st.binary(max_size=8)))


@st.composite
def acks(draw: st.DrawFn) -> pb.CommandAck:
    body = field_bytes(1, 0, draw(ints)) + field_bytes(2, 0, draw(st.sampled_from([0, 1])))
    for _ in range(draw(st.integers(0, 6))):
        body += field_bytes(3, 2, draw(message_ids()))
    body += draw(fields_of(ACK_FIELDS, message_ids()))
    ack = pb.CommandAck()
    try:
        ack.ParseFromString(body)
    except Exception:  # upb refused the bytes: a broker never gets this far with them
        assume(False)
    return ack


def positions(ack: pb.CommandAck, position: Any) -> list[tuple[Any, Any]]:
    # Types as well as values: a plain tuple equals a NamedTuple.
    pairs = _speedups.acked_positions(ack, position)
    return [(type(where), where, ack_set) for where, ack_set in pairs]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(acks())
def test_acked_positions_match_the_reference(ack: pb.CommandAck) -> None:
    for position in (Where, lambda ledger, entry: ("made", ledger, entry)):
        expected = [(type(w), w, s) for w, s in py_acked_positions(ack, position)]
        assert positions(ack, position) == expected


def test_acked_positions_reads_signed_ids_and_ack_sets() -> None:
    ack = pb.CommandAck(consumer_id=1, ack_type=0)
    ack.message_id.add(ledgerId=U64, entryId=7).ack_set.extend([-1, 5])
    ack.message_id.add(ledgerId=3, entryId=1 << 63)
    assert _speedups.acked_positions(ack, Where) == [
        (Where(-1, 7), [-1, 5]),
        (Where(3, -(1 << 63)), None),
    ]


def test_acked_positions_reads_an_ack_group_itself() -> None:
    """The fast path really runs: with a reference that refuses every call, a client's ack
    group (ids with and without ack sets) still reads."""

    def no_reference(ack: pb.CommandAck, position: Any) -> list[tuple[Any, Any]]:
        raise AssertionError("the reference was asked")

    ack = pb.CommandAck(consumer_id=1, ack_type=0, request_id=5)
    for entry in range(100):
        message_id = ack.message_id.add(ledgerId=4, entryId=entry)
        if entry % 10 == 0:
            message_id.ack_set.append(6)
    _speedups.bind_acked_positions(no_reference)
    try:
        assert _speedups.acked_positions(ack, Where) == py_acked_positions(ack, Where)
    finally:
        _speedups.bind_acked_positions(py_acked_positions)
