"""The sink's batch boundaries depend only on the rows (pure, no JVM)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_connector.batches import BatchCutter, cut_points


def test_count_cuts() -> None:
    assert cut_points([10] * 10, 4, 10_000) == [4, 8]
    assert cut_points([10] * 8, 4, 10_000) == [4]


def test_byte_cuts_and_a_big_row_alone() -> None:
    assert cut_points([40, 40, 40, 40], 100, 100) == [2]
    assert cut_points([10, 500, 10], 100, 100) == [1, 2]


@settings(max_examples=100, deadline=None)  # no deadline: a loaded 2-core box
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=60),
    st.integers(1, 8),
    st.integers(1, 1000),
    st.data(),
)
def test_a_prefix_forms_the_same_batches(
    sizes: list[int], max_messages: int, max_bytes: int, data: st.DataObject
) -> None:
    """An attempt that stopped after ``prefix`` rows cut where the full replay cuts."""
    cuts = cut_points(sizes, max_messages, max_bytes)
    prefix = data.draw(st.integers(1, len(sizes)))
    assert cut_points(sizes[:prefix], max_messages, max_bytes) == [c for c in cuts if c < prefix]
    bounds = [0, *cuts, len(sizes)]
    for first, stop in itertools.pairwise(bounds):
        assert 0 < stop - first <= max_messages
        assert stop - first == 1 or sum(sizes[first:stop]) <= max_bytes


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=60),
    st.integers(1, 8),
    st.integers(1, 1000),
    st.data(),
)
def test_split_in_chunks_cuts_where_cut_points_does(
    sizes: list[int], max_messages: int, max_bytes: int, data: st.DataObject
) -> None:
    """``split`` carries the batch in progress across chunks: any chunking gives the cuts of
    the whole sequence (the sink's Arrow chunks depend on how Spark hands the rows over)."""
    bounds = sorted(set(data.draw(st.lists(st.integers(0, len(sizes)), max_size=6))))
    cutter = BatchCutter(max_messages, max_bytes)
    ends: list[int] = []
    for first, stop in itertools.pairwise([0, *bounds, len(sizes)]):
        ends += [first + end for end in cutter.split(sizes[first:stop])]
    assert [end for end in ends if end < len(sizes)] == cut_points(sizes, max_messages, max_bytes)
    assert (cutter.count == 0) == (bool(ends) and ends[-1] == len(sizes))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 400), max_size=40), max_size=6),
    st.integers(1, 10),
    st.integers(1, 1200),
)
def test_split_cuts_where_the_row_at_a_time_reference_does(
    chunks: list[list[int]], max_messages: int, max_bytes: int
) -> None:
    """The bisecting ``split`` gives the ends and the carried batch of ``split_each`` (the
    row-at-a-time cutter it replaced), chunk after chunk: the cuts are part of a row's
    exactly-once identity, so a build with the new cutter must cut a replay where an attempt
    of the old one did."""
    fast = BatchCutter(max_messages, max_bytes)
    reference = BatchCutter(max_messages, max_bytes)
    for sizes in chunks:
        assert fast.split(sizes) == reference.split_each(sizes)
        assert (fast.count, fast.bytes) == (reference.count, reference.bytes)


def test_uniform_rows_cut_by_count_and_by_bytes() -> None:
    """The bench's shape: equal rows, cut by the count limit, or by bytes before it."""
    assert BatchCutter(1000, 1 << 20).split([132] * 2500) == [1000, 2000]
    cutter = BatchCutter(1000, 128 * 1024)  # the defaults: 993 rows would pass 131 072 bytes
    assert cutter.split([132] * 2500) == [992, 1984]
    assert (cutter.count, cutter.bytes) == (516, 516 * 132)
    assert cutter.split([132] * 477) == [476]  # closed by the row that would pass
    by_bytes = BatchCutter(1000, 10_000)
    assert by_bytes.split([132] * 200) == [75, 150]  # 76 rows would pass 10 000 bytes
    assert BatchCutter(10, 100).split([40, 200, 40]) == [1, 2]  # a big row goes alone


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 400), st.integers(0, 40)), max_size=6),
    st.integers(1, 10),
    st.integers(1, 1200),
)
def test_split_of_rows_of_one_size_cuts_as_the_reference(
    chunks: list[tuple[int, int]], max_messages: int, max_bytes: int
) -> None:
    """``split(sizes, uniform)`` (running totals as a ``range``, no list) cuts chunks of
    equal rows where ``split_each`` does, carrying the same batch from chunk to chunk, also
    when the size changes between chunks."""
    fast = BatchCutter(max_messages, max_bytes)
    reference = BatchCutter(max_messages, max_bytes)
    for size, count in chunks:
        assert fast.split([size] * count, size) == reference.split_each([size] * count)
        assert (fast.count, fast.bytes) == (reference.count, reference.bytes)
