"""Tests for broker.publish.dedup_types: the configuration refuses nonsense."""

from __future__ import annotations

import pytest

from broker.publish.dedup_types import DedupConfig


@pytest.mark.parametrize(
    "kwargs",
    [{"entries_interval": 0}, {"snapshot_interval_s": -1}, {"max_number_of_producers": 0}],
)
def test_config_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        DedupConfig(**kwargs)  # type: ignore[arg-type]
