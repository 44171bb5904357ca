"""broker.metadata_store: what the stores accept."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.metadata_store import PolicyStore
from protocol.topic_name import InvalidTopicNameError


@pytest.mark.parametrize(
    "bad", ["public/..", "../default", "./x", "public", "a/b/c", "te nant/ns", "t/n%2Fs", ""]
)
async def test_create_namespace_refuses_invalid_names(tmp_path: Path, bad: str) -> None:
    store = PolicyStore(tmp_path)
    with pytest.raises(InvalidTopicNameError):
        await store.create_namespace(bad)
    assert not store.has_namespace(bad)
    assert not (tmp_path / "policies.json").exists()


async def test_create_namespace_accepts_pulsar_names(tmp_path: Path) -> None:
    store = PolicyStore(tmp_path)
    assert await store.create_namespace("My_Tenant-1/ns=a:b.c")
    assert PolicyStore(tmp_path).has_namespace("My_Tenant-1/ns=a:b.c")
