"""broker/publish/idempotency_table.py: the compiled KeyTable against the reference PyKeyTable
and both against a plain model (a dict and a list in acceptance order), on random operations;
the memory per key; the snapshot rendered as JSON text (the same bytes as ``json.dumps``); and
the v1 snapshot a build before issue #26 wrote, opened by this one."""

from __future__ import annotations

import gc
import json
import shutil
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.publish.idempotency_snapshot import recover_window
from broker.publish.idempotency_table import DEAD, DURABLE, IN_FLIGHT, PyKeyTable
from broker.publish.idempotency_window import WindowConfig
from broker.storage import Ledger, LedgerConfig, Position
from protocol import _speedups
from protocol.idempotency_scan import key_digest

V1_DIRECTORY = Path(__file__).parent / "data" / "idempotency_v1"

operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 40)),
        st.tuples(st.just("persist"), st.integers(0, 60)),
        st.tuples(st.just("discard"), st.integers(0, 60)),
        st.tuples(st.just("expire"), st.integers(0, 60)),
        st.tuples(st.just("evict"), st.integers(0, 30)),
        st.tuples(st.just("clear"), st.just(0)),
        st.tuples(st.just("reserve"), st.integers(0, 40)),
    ),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_compiled_table_matches_the_reference(ops: list[tuple[str, int]]) -> None:
    """Every answer of the compiled table equals the reference's, and both keep the window's
    rules: a digest is found iff it was added and has not left; slots leave from the head only
    past an in-flight slot never."""
    compiled, reference = _speedups.KeyTable(), PyKeyTable()
    added: list[bytes] = []
    for op, n in ops:
        digest = key_digest(str(n).encode())
        if op == "add":
            if reference.find(digest) >= 0:
                continue
            seq = reference.add(digest, float(len(added)))
            assert compiled.add(digest, float(len(added))) == seq == len(added)
            added.append(digest)
        elif op == "persist" and added:
            seq = n % len(added)
            expected = (
                reference.state(seq) == IN_FLIGHT if reference.find(added[seq]) == seq else False
            )
            assert reference.persist(seq, 1, n, n % 3 - 1) is expected
            assert compiled.persist(seq, 1, n, n % 3 - 1) is expected
        elif op == "discard" and added:
            seq = reference.find(added[n % len(added)])
            if seq >= 0:
                compiled.discard(seq)
                reference.discard(seq)
                assert reference.find(added[n % len(added)]) == -1
        elif op == "expire":
            assert compiled.expire_older(float(n), 5.0) == reference.expire_older(float(n), 5.0)
        elif op == "evict":
            assert compiled.evict_over(n) == reference.evict_over(n)
            in_flight = len(reference) - reference.durable
            assert reference.durable <= n or in_flight > 0
        elif op == "reserve":  # the SEND path's one call: expire, evict, find or add
            now, max_keys = float(len(added)), n % 7 + 1
            slot = reference.reserve(digest, now, 5.0, max_keys)
            assert compiled.reserve(digest, now, 5.0, max_keys) == slot
            if slot >= 0:
                assert slot == len(added)
                assert reference.state(slot) == IN_FLIGHT
                added.append(digest)
            else:
                assert reference.find(digest) == -1 - slot
        elif op == "clear":
            compiled.clear_durable()
            reference.clear_durable()
            assert reference.durable == 0
        assert len(compiled) == len(reference)
        assert compiled.durable == reference.durable
        assert (compiled.expired, compiled.evicted) == (reference.expired, reference.evicted)
        assert compiled.snapshot_records() == reference.snapshot_records()
        assert compiled.snapshot_json("d:") == reference.snapshot_json("d:")
        newest = {digest_n: seq for seq, digest_n in enumerate(added)}  # re-added: a new slot
        for digest_n, seq in newest.items():
            found = reference.find(digest_n)
            assert compiled.find(digest_n) == found
            assert found in (-1, seq)
            if found >= 0:
                assert compiled.state(seq) == reference.state(seq) != DEAD
    for seq in reference.durable_slots():
        assert compiled.location(seq) == reference.location(seq)
        assert compiled.stamp(seq) == reference.stamp(seq)
        assert compiled.state(seq) == reference.state(seq) == DURABLE


def test_many_keys_grow_shrink_and_stay_findable() -> None:
    """Past the growth and shrink points of ring and index, with removals from the middle."""
    table = _speedups.KeyTable()
    digests = [key_digest(str(i).encode()) for i in range(20_000)]
    for i, digest in enumerate(digests):
        assert table.persist(table.add(digest, float(i)), 1, i, -1)
    for i in range(0, 20_000, 7):
        table.discard(table.find(digests[i]))
    assert table.expire_older(15_000.0, 1.0) > 0  # now - stamp >= 1: stamps up to 14999 leave
    for i, digest in enumerate(digests):
        found = table.find(digest)
        assert (found >= 0) == (i >= 15_000 and i % 7 != 0), i
        if found >= 0:
            assert table.location(found) == (1, i, -1)


def test_a_key_costs_at_most_100_bytes() -> None:
    """Issue #26: the window's memory per key (digest, stamp, location, index, growth slack),
    traced at a size between two growth steps, where the slack is largest."""
    gc.collect()
    tracemalloc.start()
    table = _speedups.KeyTable()
    count = 150_000
    for i in range(count):
        table.persist(table.add(key_digest(i.to_bytes(8, "little")), 1.0), 1, i, -1)
    traced, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert traced / count <= 100, traced / count


def test_a_snapshot_written_before_digests_is_read(tmp_path: Path) -> None:
    """The upgrade rule of issue #22: the topic directory in ``data/idempotency_v1`` was written
    by the build before issue #26 (format 1, ``"k:" + key`` names; a snapshot after four
    entries, two more entries to replay). This build reads it and answers as that one did."""
    directory = tmp_path / "topic"
    shutil.copytree(V1_DIRECTORY, directory)
    ledger = Ledger.open(
        directory,
        LedgerConfig(preallocate_bytes=0, retention_time_minutes=-1, retention_size_mb=-1),
    )
    try:
        window = recover_window(ledger, WindowConfig(window_seconds=10**10, max_keys=100))
        assert window.replayed_entries == 2
        assert window.original_of("order-1") == (Position(1, 0), 0)
        assert window.original_of("order-2") == (Position(1, 2), 0)
        assert window.original_of("order-3") == (Position(1, 2), 2)
        assert window.original_of("ключ-ü") == (Position(1, 3), 0)
        assert window.original_of("order-4") == (Position(1, 4), 0)  # replayed
        assert window.original_of("order-5") == (Position(2, 0), 0)  # replayed
        assert window.hidden_indexes(Position(1, 2)) == 0b010  # from the snapshot
        assert window.hidden_indexes(Position(2, 0)) == 0b10  # re-derived by the replay
        assert window.check(["order-1"]).original == Position(1, 0)
        assert window.stats()["keys"] == 6
    finally:
        ledger.close()


def test_reserve_is_check_then_add_in_one_call() -> None:
    """`reserve` expires by time and count first, then finds or adds: a key that just left is
    new again; a live one answers its slot (in flight or durable) and changes nothing."""
    for table in (_speedups.KeyTable(), PyKeyTable()):
        a, b, c = (key_digest(name) for name in (b"a", b"b", b"c"))
        slot_a = table.reserve(a, 0.0, 10.0, 2)
        assert slot_a == 0
        assert table.state(slot_a) == IN_FLIGHT
        assert table.reserve(a, 1.0, 10.0, 2) == -1 - slot_a  # in flight: found, not added
        assert table.persist(slot_a, 1, 0, 0)
        assert table.reserve(a, 9.9, 10.0, 2) == -1 - slot_a  # durable, inside the window
        slot_b = table.reserve(b, 10.0, 10.0, 2)  # a left by time (10.0 - 0.0 >= 10)
        assert (slot_b, table.expired, table.find(a)) == (1, 1, -1)
        table.persist(slot_b, 1, 1, 0)
        table.persist(table.reserve(a, 10.0, 10.0, 2), 1, 2, 0)
        slot_c = table.reserve(c, 10.0, 10.0, 1)  # two durable, max 1: b (the oldest) leaves
        assert (table.evicted, table.find(b), table.find(c)) == (1, -1, slot_c)
        assert len(table) == 2
        assert table.durable == 1


def _properties(table: PyKeyTable | _speedups.KeyTable, prefix: str) -> dict[str, int]:
    """The snapshot's key properties as a dict, oldest first: what the snapshot stored before
    it was rendered as text (``idempotency_snapshot.encode_snapshot``'s keys)."""
    return {prefix + digest.hex(): packed for digest, packed in table.snapshot_records()}


def _members(properties: dict[str, int]) -> bytes:
    """What ``json.dumps`` (the cursor file's encoder) writes between the braces."""
    return json.dumps(properties, separators=(",", ":"))[1:-1].encode()


@settings(max_examples=200, deadline=None)
@given(operations, st.sampled_from(["d:", "", "key/ ~!"]))
def test_snapshot_json_gives_the_reference_bytes(ops: list[tuple[str, int]], prefix: str) -> None:
    """The compiled rendering (issue #26 item 6) gives the reference's bytes, and both are what
    ``json.dumps`` writes for the snapshot's properties, after any history of the table (slots
    dead, expired, in flight, the ring wrapped)."""
    compiled, reference = _speedups.KeyTable(), PyKeyTable()
    added = 0
    for op, n in ops:
        digest = key_digest(str(n).encode())
        for table in (compiled, reference):
            if op in ("add", "reserve"):
                seq = table.reserve(digest, float(added), 5.0, n % 7 + 1)
                if seq >= 0:
                    table.persist(seq, n % 3, n * 1_000_003, n % 4 - 1)
            elif op == "discard" and table.find(digest) >= 0:
                table.discard(table.find(digest))
            elif op == "expire":
                table.expire_older(float(n), 5.0)
            elif op == "evict":
                table.evict_over(n)
        added += op in ("add", "reserve")
    text = compiled.snapshot_json(prefix)
    assert text == reference.snapshot_json(prefix)
    assert text == _members(_properties(reference, prefix))
    assert json.loads(b"{" + text + b"}") == _properties(reference, prefix)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.floats(min_value=0, max_value=2e12, allow_nan=False),  # as the packing test below
)
@example(2**63 - 1, 2**63 - 1, 2**21 - 2, (2**45 - 1) / 1000)  # the widest fast value
@example(0, 0, -1, 0.0)  # zero
@example(0, 0, 0, 0.0)
@example(1, 0, -1, 0.0)  # 2**130: only the upper limbs
@example(0, 1, -1, 0.000_999)  # 2**66 | 1
def test_snapshot_json_renders_every_location_as_the_reference(
    ledger_id: int, entry_id: int, batch_index: int, stamp: float
) -> None:
    """The compiled decimal rendering (nine digits per division of 32-bit limbs), and the
    reference's arithmetic outside the fields' widths, give the reference's text."""
    compiled, reference = _speedups.KeyTable(), PyKeyTable()
    digest = key_digest(b"k")
    for table in (compiled, reference):
        table.persist(table.add(digest, stamp), ledger_id, entry_id, batch_index)
    text = compiled.snapshot_json("d:")
    assert text == reference.snapshot_json("d:")
    assert text == _members(_properties(reference, "d:"))


def test_snapshot_json_of_a_large_window_over_ledgers() -> None:
    """100k keys in three ledgers, with batch indexes and sub-millisecond stamps: one buffer,
    the bytes ``json.dumps`` writes; an empty table renders nothing."""
    compiled, reference = _speedups.KeyTable(), PyKeyTable()
    assert compiled.snapshot_json("d:") == reference.snapshot_json("d:") == b""
    for i in range(100_000):
        digest = key_digest(b"key-%d" % i)
        ledger_id, entry_id = 3 + i // 40_000, i % 40_000
        for table in (compiled, reference):
            table.persist(
                table.add(digest, 1_700_000_000.0 + i / 3), ledger_id, entry_id, i % 5 - 1
            )
    text = compiled.snapshot_json("d:")
    assert text == _members(_properties(compiled, "d:"))
    assert text == reference.snapshot_json("d:")


@pytest.mark.parametrize("prefix", ['d"', "d\\", "d\n", "d\x7f", "dé", "d" * 65])
def test_snapshot_json_refuses_a_prefix_json_would_escape(prefix: str) -> None:
    """The names are written unescaped, so a prefix that JSON escapes (or a long one) is refused
    by both, not rendered into a document that decodes to other names."""
    for table in (_speedups.KeyTable(), PyKeyTable()):
        with pytest.raises(ValueError, match="no JSON name prefix"):
            table.snapshot_json(prefix)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            st.one_of(st.integers(0, 2**20), st.integers(-(2**63), 2**63 - 1)),
            st.one_of(st.integers(-1, 5), st.integers(-(2**31), 2**31 - 1)),
            st.one_of(st.just(1_700_000_000.0005), st.floats(0, 2e12, allow_nan=False)),
        ),
        max_size=12,
    )
)
def test_a_snapshot_copy_renders_mixed_locations_and_ignores_later_changes(
    locations: list[tuple[int, int, int, float]],
) -> None:
    """Slots within the fields' widths (rendered without the GIL) and outside them (the
    reference's arithmetic, with the GIL) in any order, in one text; a copy renders what the
    table held when it was taken, whatever the table did since."""
    compiled, reference = _speedups.KeyTable(), PyKeyTable()
    for n, (ledger_id, entry_id, batch_index, stamp) in enumerate(locations):
        digest = key_digest(b"%d" % n)
        for table in (compiled, reference):
            table.persist(table.add(digest, stamp), ledger_id, entry_id, batch_index)
    expected = reference.snapshot_json("d:")
    assert expected == _members(_properties(reference, "d:"))
    copy, reference_copy = compiled.snapshot_copy(), reference.snapshot_copy()
    assert len(copy) == len(reference_copy) == len(locations)
    for table in (compiled, reference):
        table.clear_durable()
        table.persist(table.add(key_digest(b"later"), 5.0), 1, 1, -1)
    assert copy.json("d:") == reference_copy.json("d:") == expected
