"""Buckets: the plain histogram the storage writer and topics record into."""

from __future__ import annotations

import pytest

from broker.storage.buckets import LATENCY_MS_BOUNDS, Buckets


def test_a_value_on_a_bound_counts_in_that_bucket() -> None:
    buckets = Buckets([1, 5, 10])
    for value in (0.2, 1, 1.01, 5, 10, 10.5, 1000):
        buckets.observe(value)
    snapshot = buckets.snapshot()
    assert snapshot.counts == (2, 2, 1, 2)
    assert snapshot.count == 7
    assert snapshot.total == pytest.approx(1027.71)
    assert snapshot.cumulative() == [(1, 2), (5, 4), (10, 5), (float("inf"), 7)]


def test_snapshots_merge_per_namespace_and_refuse_other_bounds() -> None:
    first, second = Buckets(LATENCY_MS_BOUNDS), Buckets(LATENCY_MS_BOUNDS)
    first.observe(0.3)
    second.observe(0.3)
    second.observe(2000)
    merged = first.snapshot().merged(second.snapshot())
    assert merged.count == 3
    assert merged.cumulative()[0] == (0.5, 2)
    assert merged.total == pytest.approx(2000.6)
    with pytest.raises(ValueError, match="different bounds"):
        merged.merged(Buckets([1]).snapshot())


def test_bounds_must_increase() -> None:
    with pytest.raises(ValueError, match="increasing"):
        Buckets([5, 1])
    with pytest.raises(ValueError, match="increasing"):
        Buckets([1, 1])


def test_an_unobserved_histogram_reads_zero_in_every_bucket() -> None:
    """The counts are made by the first observation (issue #26); before it a snapshot has a
    zero for each bucket, and merges with an observed one."""
    empty, used = Buckets([1.0, 5.0]), Buckets([1.0, 5.0])
    assert empty.snapshot().counts == (0, 0, 0)
    used.observe(3.0)
    assert empty.snapshot().merged(used.snapshot()).counts == (0, 1, 0)
    empty.observe(9.0)
    assert empty.snapshot().counts == (0, 0, 1)
    assert empty.snapshot().total == 9.0


def test_counted_observations_add_up_as_observed_ones() -> None:
    observed, counted = Buckets([1, 5, 10]), Buckets([1, 5, 10])
    assert counted.bounds == (1.0, 5.0, 10.0)
    for value in (0.2, 1, 5, 10.5):
        observed.observe(value)
    counted.observe_counted([2, 1, 0, 0], 6.2)  # the first tally makes the counts
    counted.observe_counted([0, 0, 0, 1], 10.5)
    assert counted.snapshot() == observed.snapshot()
    with pytest.raises(ValueError, match="3 counts for 4 buckets"):
        counted.observe_counted([1, 1, 1], 3.0)
    assert counted.snapshot() == observed.snapshot()
