"""``ConsumerKeySharedPolicy`` and ``KeySharedMode`` as the official ones, and what a Key_Shared
SUBSCRIBE carries (``keySharedMeta``)."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

import client
from client import ConsumerKeySharedPolicy, ConsumerType, KeySharedMode
from client.consumer.config import SubscribeOptions
from client.key_shared import key_shared_meta_for
from protocol import pb

CASES: list[tuple[str, dict[str, Any]]] = [
    ("default", {}),
    ("auto split, out of order", {"mode": "AutoSplit", "allow_out_of_order_delivery": True}),
    ("sticky", {"mode": "Sticky", "sticky_ranges": [(0, 100), (200, 65535)]}),
    ("sticky, touching", {"mode": "Sticky", "sticky_ranges": [(0, 10), (11, 20)]}),
    ("sticky without ranges", {"mode": "Sticky"}),
    ("sticky, empty ranges", {"mode": "Sticky", "sticky_ranges": []}),
    ("sticky, overlap", {"mode": "Sticky", "sticky_ranges": [(0, 10), (10, 20)]}),
    ("sticky, past the end", {"mode": "Sticky", "sticky_ranges": [(0, 65536)]}),
    ("sticky, negative", {"mode": "Sticky", "sticky_ranges": [(-1, 5)]}),
    ("sticky, upside down", {"mode": "Sticky", "sticky_ranges": [(10, 0), (5, 6)]}),
    ("auto split with ranges", {"mode": "AutoSplit", "sticky_ranges": [(0, 10)]}),
]


def _build(module: Any, options: dict[str, Any]) -> Any:
    options = dict(options)
    mode = options.pop("mode", None)
    if mode is not None:
        options["key_shared_mode"] = getattr(module.KeySharedMode, mode)
    return module.ConsumerKeySharedPolicy(**options)


@pytest.mark.parametrize(("case", "options"), CASES, ids=[c for c, _ in CASES])
def test_the_policy_behaves_as_the_official_one(case: str, options: dict[str, Any]) -> None:
    refusal: str | None = None
    try:
        official = _build(pulsar, options)
    except ValueError as exc:
        refusal = str(exc)
    if refusal is not None:
        with pytest.raises(ValueError) as ours:
            _build(client, options)
        assert str(ours.value) == refusal
        return
    mine = _build(client, options)
    assert int(mine.key_shared_mode) == int(official.key_shared_mode)
    assert mine.allow_out_of_order_delivery == official.allow_out_of_order_delivery
    assert mine.sticky_ranges == official.sticky_ranges


def test_the_official_mode_names_are_the_wire_values() -> None:
    assert int(KeySharedMode.AutoSplit) == int(pb.AUTO_SPLIT)
    assert int(KeySharedMode.AutoSplit) == int(pulsar.KeySharedMode.AutoSplit)
    assert int(KeySharedMode.Sticky) == int(pb.STICKY)
    assert int(KeySharedMode.Sticky) == int(pulsar.KeySharedMode.Sticky)
    assert KeySharedMode(1) is KeySharedMode.Sticky  # one enum, two spellings of each member


def test_sticky_ranges_are_a_copy() -> None:
    policy = ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[(0, 9)])
    policy.sticky_ranges.append((10, 20))
    assert policy.sticky_ranges == [(0, 9)]
    assert policy.policy() is policy


def test_a_key_shared_subscribe_carries_the_policy() -> None:
    policy = ConsumerKeySharedPolicy(KeySharedMode.Sticky, True, [(5, 10), (20, 30)])
    meta = key_shared_meta_for(ConsumerType.KeyShared, policy)
    assert meta is not None
    assert meta.keySharedMode == pb.STICKY
    assert [(r.start, r.end) for r in meta.hashRanges] == [(5, 10), (20, 30)]
    assert meta.allowOutOfOrderDelivery


def test_a_key_shared_subscribe_without_a_policy_sends_the_default_as_the_cpp_client() -> None:
    meta = key_shared_meta_for(ConsumerType.KeyShared, None)
    assert meta == pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT, allowOutOfOrderDelivery=False)
    assert meta is not None
    assert meta.HasField("allowOutOfOrderDelivery")


def test_auto_split_sends_no_ranges_and_other_types_no_meta() -> None:
    policy = ConsumerKeySharedPolicy(KeySharedMode.AutoSplit, sticky_ranges=[(0, 10)])
    meta = key_shared_meta_for(ConsumerType.KeyShared, policy)
    assert meta is not None
    assert not meta.hashRanges
    assert key_shared_meta_for(ConsumerType.Shared, policy) is None


def test_subscribe_checks_the_policy_type_as_the_official_one() -> None:
    with pytest.raises(ValueError, match="key_shared_policy is expected to be either None or"):
        SubscribeOptions("t", "s", key_shared_policy=3)  # type: ignore[arg-type]
    options = SubscribeOptions(
        "t", "s", ConsumerType.KeyShared, key_shared_policy=ConsumerKeySharedPolicy()
    )
    assert options.consumer_config().key_shared_policy is options.key_shared_policy
