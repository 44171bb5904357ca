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
