"""broker/publish/idempotency_gate.py: the compiled KeyGate (protocol/_idem_window.pxi) against
the reference PyKeyGate on generated entries, clocks and persists: the same answers, stamps and
tables; and each answer is what quick_key and the table's reserve say of the entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.publish.idempotency_gate import PyKeyGate
from broker.publish.idempotency_keys import MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES
from broker.publish.idempotency_window import IdempotencyWindow, WindowConfig
from broker.storage import Position
from protocol import _speedups, pb
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY
from protocol.idempotency_scan import key_digest, py_quick_key
from protocol.metadata import encode_entry

KEY = IDEMPOTENCY_KEY_PROPERTY
key_values = st.sampled_from(["", "a", "b", "c", "req-1", "req-2", "é"])


@st.composite
def entries(draw: st.DrawFn) -> bytes:
    """Keyless, keyed, batched, compressed, chunked and encrypted entries, some damaged."""
    md = pb.MessageMetadata(producer_name="p", sequence_id=draw(st.integers(0, 9)))
    md.publish_time = 1
    for name in draw(st.lists(st.sampled_from([KEY, "other", KEY + "x"]), max_size=3)):
        md.properties.add(key=name, value=draw(key_values))
    if draw(st.integers(0, 4)) == 0:
        md.num_messages_in_batch = draw(st.integers(-2, 3))
    if draw(st.integers(0, 4)) == 0:
        md.compression = draw(st.sampled_from([0, 1, 2]))  # type: ignore[assignment]
    if draw(st.integers(0, 6)) == 0:
        md.num_chunks_from_msg = draw(st.integers(1, 3))
    if draw(st.integers(0, 6)) == 0:
        md.encryption_keys.add(key="k", value=b"v")
    payload = draw(st.sampled_from([b"", b"x" * 10, KEY.encode()]))
    entry = bytearray(encode_entry(md, payload))
    for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0):
        at = draw(st.integers(0, len(entry) - 1))
        entry[at] = draw(st.integers(0, 255))  # damaged bytes: the walk must still agree
    if draw(st.integers(0, 8)) == 0:
        del entry[draw(st.integers(0, len(entry))) :]
    return bytes(entry)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("entry"), entries()),
        st.tuples(st.just("clock"), st.sampled_from([-5.0, 0.0, 0.5, 3.0, 10.0])),
        st.tuples(st.just("persist"), st.integers(0, 30)),
    ),
    max_size=60,
)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _gate(kind: Callable[[], PyKeyGate], clock: _Clock) -> PyKeyGate:
    gate = kind()
    gate._init_gate(clock, 5.0, 4)  # a short window and a small table: expiry and eviction
    return gate


@settings(max_examples=400, deadline=None)
@given(steps)
def test_compiled_gate_matches_the_reference(ops: list[tuple[str, object]]) -> None:
    clock = _Clock()
    compiled = _gate(_speedups.KeyGate, clock)
    reference = _gate(PyKeyGate, clock)
    slots: list[int] = []
    for op, value in ops:
        if op == "clock":
            assert isinstance(value, float)
            clock.now += value  # may step back: stamps must not
        elif op == "persist" and slots:
            assert isinstance(value, int)
            slot = slots[value % len(slots)]
            for gate in (compiled, reference):
                gate._table.persist(slot, 1, slot, 0)
                gate._table.evict_over(gate._max_keys)
        elif op == "entry":
            assert isinstance(value, bytes)
            answer = compiled.reserve_entry(value, MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES)
            expected = reference.reserve_entry(value, MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES)
            assert type(answer) is type(expected), (value, answer)
            assert answer == expected, (value, answer)
            quick = py_quick_key(value, MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES)
            assert (type(quick) is bytes) == (type(answer) is int)
            if type(quick) is not bytes:
                assert answer is quick
            if type(answer) is int and answer >= 0:
                slots.append(answer)
        assert compiled._last_stamp == reference._last_stamp
        assert compiled._shared == reference._shared
        assert len(compiled._table) == len(reference._table)
        assert compiled._table.durable == reference._table.durable


def test_reserve_key_answers_new_then_live_then_new_after_the_window() -> None:
    clock = _Clock()
    for kind in (_speedups.KeyGate, PyKeyGate):
        gate = _gate(kind, clock)
        digest = key_digest(b"k")
        slot = gate.reserve_key(digest)
        assert slot == 0
        assert gate.reserve_key(digest) == -1 - slot  # in flight: found live
        gate._table.persist(slot, 3, 4, 0)
        assert gate.reserve_key(digest) == -1 - slot  # durable: found live
        clock.now += 5.0  # exactly the window: the key has left
        assert gate.reserve_key(digest) == 1
        clock.now -= 5.0


def test_the_window_answers_a_live_key_found_by_reserve_entry() -> None:
    """The SEND path's contract (`Publisher.submit`): a negative answer goes to found_answer."""
    clock = _Clock()
    window = IdempotencyWindow(WindowConfig(window_seconds=60, max_keys=10), clock)
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    md.properties.add(key=KEY, value="req-7")
    entry = encode_entry(md, b"x")
    slot = window.reserve_entry(entry, MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES)
    assert isinstance(slot, int)
    assert slot >= 0
    again = window.reserve_entry(entry, MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES)
    assert isinstance(again, int)
    assert again < 0
    assert window.found_answer(again) is None  # still being written
    assert window.in_flight_answers == 1
    window.on_persisted(slot, Position(2, 9))
    again = window.reserve_entry(entry, MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES)
    assert isinstance(again, int)
    assert window.found_answer(again) == Position(2, 9)
    assert window.duplicates == 1
    keyless = pb.MessageMetadata(producer_name="p", sequence_id=2, publish_time=1)
    keyless_entry = encode_entry(keyless, b"")
    answer = window.reserve_entry(keyless_entry, MAX_KEYED_HEADER_BYTES, MAX_KEYED_PROPERTIES)
    assert answer is False


class _PyRecording(PyKeyGate):
    """The reference gate, recording the tickets it hands to the window."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, Position]] = []

    def on_keys_persisted(self, ticket: object, position: Position) -> None:
        self.calls.append((ticket, position))


class _CompiledRecording(_speedups.KeyGate):  # type: ignore[misc]
    def __init__(self) -> None:
        self.calls: list[tuple[object, Position]] = []

    def on_keys_persisted(self, ticket: object, position: Position) -> None:
        self.calls.append((ticket, position))


class _Write:
    """A publication other than the compiled class (settling takes any with these fields)."""

    def __init__(self, ticket: object, position: Position) -> None:
        self.ticket = ticket
        self.position = position


# One publication of a durable group: its key (None: keyless; "batch": a batch's ticket,
# which goes to the window), and which class carries it.
group_writes = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d", "e", "f", None, "batch"]), st.booleans()),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(group_writes, max_size=4))
def test_persist_group_matches_the_reference(groups: list[list[tuple[str | None, bool]]]) -> None:
    """Groups of keyed, keyless and batch publications settle to the same tables (slots,
    locations, evictions at max_keys 4) and hand the same batch tickets to the window."""
    clock = _Clock()
    gates: list[_PyRecording | _CompiledRecording] = [_CompiledRecording(), _PyRecording()]
    for gate in gates:
        gate._init_gate(clock, 5.0, 4)
    entry_id = 0
    for writes in groups:
        built: list[list[object]] = [[], []]
        for key, compiled_class in writes:
            position = Position(3, entry_id)
            entry_id += 1
            for side, gate in enumerate(gates):
                ticket: object = None
                if key == "batch":
                    ticket = ("batch", entry_id)
                elif key is not None:
                    slot = gate.reserve_key(key_digest(key.encode()))
                    ticket = slot if slot >= 0 else None  # a live key: answered, not staged
                if compiled_class:
                    write: Any = _speedups.Publication(None, 0, b"", -1, 0.0, None, None)
                    write.position, write.ticket = position, ticket
                else:
                    write = _Write(ticket, position)
                built[side].append(write)
        for side, gate in enumerate(gates):
            gate.persist_group(built[side])
        compiled, reference = gates
        assert compiled.calls == reference.calls
        assert len(compiled._table) == len(reference._table)
        assert compiled._table.durable == reference._table.durable
        assert compiled._table.evicted == reference._table.evicted
        for key in "abcdef":
            found = compiled._table.find(key_digest(key.encode()))
            assert found == reference._table.find(key_digest(key.encode()))
            if found >= 0:
                assert compiled._table.state(found) == reference._table.state(found)
                assert compiled._table.location(found) == reference._table.location(found)


def test_persist_group_makes_a_single_key_durable_where_it_was_written() -> None:
    window = IdempotencyWindow(WindowConfig(window_seconds=60, max_keys=10), _Clock())
    slot = window.reserve_key(key_digest(b"k"))
    assert slot >= 0
    write: Any = _speedups.Publication(None, 0, b"", -1, 0.0, None, None)
    write.position, write.ticket = Position(5, 6), slot
    keyless: Any = _speedups.Publication(None, 0, b"", -1, 0.0, None, None)
    keyless.position = Position(5, 7)
    window.persist_group([write, keyless])
    assert window.original_of("k") == (Position(5, 6), 0)
    assert window.stats()["keysInFlight"] == 0
