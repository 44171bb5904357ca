"""carry_over: batches a task is done with are held until later batches arrive, then dropped
(their Arrow memory freed) a batch's worth at a time, within a byte bound; the sorter hands
its batches over after a spill and at its end."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from spark_connector import row_order
from spark_connector.carry_over import CarryOver
from spark_connector.row_order import ArrowSorter

# Counts what the batches of these tests allocate; it must outlive them (a batch frees its
# memory through it), hence one for the module.
POOL = pa.proxy_memory_pool(pa.default_memory_pool())


def batch_of(rows: int, size: int = 100) -> pa.RecordBatch:
    values = pa.array([bytes([i % 256]) * size for i in range(rows)], pa.binary(), memory_pool=POOL)
    return pa.RecordBatch.from_arrays([values], names=["value"])


def test_dropped_oldest_first_as_many_bytes_as_arrive() -> None:
    before = POOL.bytes_allocated()
    carry = CarryOver(retained_bytes=1 << 30)
    batches = [batch_of(1000) for _ in range(3)]
    sizes = [batch.nbytes for batch in batches]
    carry.hand_over(batches)
    del batches
    allocated = POOL.bytes_allocated()
    assert carry.held == sum(sizes)

    carry.arrived(1)  # any arrival drops at least one batch: the oldest
    assert carry.held == sizes[1] + sizes[2]
    assert POOL.bytes_allocated() < allocated  # its memory went back to the allocator

    carry.arrived(sizes[1] + 1)  # more than one batch's bytes: two go
    assert carry.held == 0
    carry.arrived(10)  # nothing left: nothing to do
    assert carry.held == 0
    assert POOL.bytes_allocated() == before


def test_holds_at_most_its_bound() -> None:
    before = POOL.bytes_allocated()
    batches = [batch_of(1000) for _ in range(4)]
    carry = CarryOver(retained_bytes=2 * batches[0].nbytes + 1)
    carry.hand_over(batches)
    assert carry.held == batches[0].nbytes + batches[1].nbytes  # the first ones that fit
    carry.hand_over(batches[2:])  # full: nothing more is held
    assert carry.held == batches[0].nbytes + batches[1].nbytes
    del batches
    carry.clear()
    assert carry.held == 0
    assert POOL.bytes_allocated() == before


def test_batches_passing_through_drop_the_carried_ones() -> None:
    """The at-least-once sink's batches drop what an exactly-once task carried, as they pass."""
    before = POOL.bytes_allocated()
    carry = CarryOver(retained_bytes=1 << 30)
    carried = [batch_of(1000) for _ in range(3)]
    carry.hand_over(carried)
    sizes = [batch.nbytes for batch in carried]
    del carried
    arriving = [batch_of(1000) for _ in range(2)]
    passed = carry.passing(iter(arriving))
    assert next(passed) is arriving[0]
    assert carry.held == sizes[1] + sizes[2]
    assert next(passed) is arriving[1]
    assert carry.held == sizes[2]
    assert list(passed) == []
    del arriving, passed
    carry.clear()
    assert POOL.bytes_allocated() == before


@pytest.fixture
def carry(monkeypatch: pytest.MonkeyPatch) -> CarryOver:
    """The sorter's carry-over, a fresh one for the test."""
    fresh = CarryOver(retained_bytes=1 << 30)
    monkeypatch.setattr(row_order, "carry_over", fresh)
    return fresh


def test_a_sorter_hands_its_batches_on_at_its_end(tmp_path: Path, carry: CarryOver) -> None:
    first = [batch_of(500, size=10 + i) for i in range(4)]
    sorter = ArrowSorter({"value": 0}, (), 1 << 30, str(tmp_path))
    for batch in first:
        sorter.add(batch)
    rows = [v for columns in sorter.sorted_columns() for v in columns.values]
    sorter.close()
    assert len(rows) == 2000
    assert carry.held == sum(batch.nbytes for batch in first)

    # The next task's batches drop them as they arrive, a batch's bytes each.
    second = ArrowSorter({"value": 0}, (), 1 << 30, str(tmp_path))
    second.add(batch_of(500, size=10))
    assert carry.held == sum(batch.nbytes for batch in first[1:])
    second.close()


def test_a_spill_hands_the_spilled_batches_on(tmp_path: Path, carry: CarryOver) -> None:
    batches = [batch_of(200, size=50) for _ in range(6)]
    sorter = ArrowSorter({"value": 0}, (), 2 * batches[0].nbytes, str(tmp_path))
    sorter.add(batches[0])
    assert carry.held == 0
    sorter.add(batches[1])  # past the bound: a run; the two batches are handed on
    assert len(sorter.runs) == 1
    assert carry.held == batches[0].nbytes + batches[1].nbytes
    sorter.add(batches[2])  # the next arrival drops the oldest
    assert carry.held == batches[1].nbytes
    for batch in batches[3:]:
        sorter.add(batch)
    merged = [b for batch in sorter.sorted_batches() for b in batch.column(0).to_pylist()]
    sorter.close()
    expected = sorted(v for batch in batches for v in batch.column(0).to_pylist())
    assert sorted(merged) == expected
