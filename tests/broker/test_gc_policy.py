"""The broker process's garbage-collector policy (broker/gc_policy.py, issue #24)."""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.gc_policy import GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD, apply_gc_policy
from tests.helpers import BrokerProcess, BrokerThread, broker_config, wait_until

FROZE = re.compile(
    r"gc: froze (\d+) start-up objects; collection thresholds \((\d+), (\d+), (\d+)\)"
)


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """Give the test process its collector back as it was, whatever the test did to it."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_gc")
def test_the_policy_freezes_what_is_alive_and_raises_the_thresholds() -> None:
    alive = [object() for _ in range(10)] + [[i] for i in range(1000)]
    gc.unfreeze()
    policy = apply_gc_policy(12_345, 6, 7)
    assert gc.get_threshold() == (12_345, 6, 7)
    assert policy.thresholds == (12_345, 6, 7)
    # Everything alive now (the 1000 lists above included) is in the permanent generation.
    assert policy.frozen == gc.get_freeze_count() >= 1000
    assert all(not any(item is x for x in gc.get_objects(generation=2)) for item in alive[-3:])


def test_the_defaults_make_young_collections_rarer_than_pythons() -> None:
    assert GEN0_THRESHOLD > 700  # CPython's default gen0 threshold
    assert (GEN1_THRESHOLD, GEN2_THRESHOLD) >= (10, 10)


def test_a_broker_in_a_library_process_leaves_the_collector_alone(tmp_path: Path) -> None:
    before = gc.get_threshold(), gc.get_freeze_count()
    broker = BrokerThread(broker_config(tmp_path / "data")).start()
    try:
        assert (gc.get_threshold(), gc.get_freeze_count()) == before
    finally:
        broker.stop()


def test_magnetar_standalone_applies_the_policy_once_serving(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        wait_until(
            lambda: FROZE.search(broker.log_path.read_text()) is not None,
            failure=lambda: broker.log_path.read_text()[-2000:],
        )
        found = FROZE.search(broker.log_path.read_text())
        assert found is not None
        frozen, *thresholds = (int(g) for g in found.groups())
        # The process's start-up objects: modules, descriptors, routes (far more than 10,000).
        assert frozen > 10_000
        assert tuple(thresholds) == (GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
    finally:
        assert broker.terminate() == 0
