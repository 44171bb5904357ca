"""Namespace bundles: hash ranges of topic names, the unit of ownership (as Pulsar).

A namespace's 2^32 hash space is cut into ``defaultNumberOfNamespaceBundles`` equal ranges
until a hot bundle is split (``split.py``); the cut points (Pulsar's ``boundaries``) are then
metadata of the namespace (``boundaries.py``). A topic belongs to the range holding Murmur3-32
of its full name (a partition's own name, so the partitions of one topic spread). Ranges are
spelled as Pulsar spells them: ``0x00000000_0x40000000`` (lower bound inclusive, upper
exclusive; the last one ends at ``0xffffffff`` inclusive, Pulsar's ``FULL_UPPER_BOUND``).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import mmh3

from protocol.topic_name import NamespaceName, TopicName

FULL_UPPER_BOUND = 0xFFFFFFFF


@dataclass(frozen=True, slots=True, order=True)
class Bundle:
    """One hash range of one namespace."""

    namespace: str  # "tenant/ns"
    lower: int
    upper: int

    @property
    def range_name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    @property
    def name(self) -> str:
        """``tenant/ns/0x00000000_0x40000000``: Pulsar's bundle name, used in admin paths."""
        return f"{self.namespace}/{self.range_name}"

    def contains(self, code: int) -> bool:
        last = self.upper == FULL_UPPER_BOUND
        return self.lower <= code < self.upper or (last and code == FULL_UPPER_BOUND)


def topic_hash(topic: TopicName) -> int:
    """Murmur3-32 (seed 0, unsigned) of the topic's full name."""
    return int(mmh3.hash(topic.full_name, 0, signed=False))


def default_boundaries(count: int) -> list[int]:
    """The cut points of ``count`` equal ranges, both ends included (Pulsar's
    ``NamespaceBundleFactory``): ``[0, 2^32/count, ..., 0xffffffff]``."""
    size = (FULL_UPPER_BOUND + 1) // count
    return [i * size for i in range(count)] + [FULL_UPPER_BOUND]


def bundles_from(namespace: NamespaceName | str, boundaries: Sequence[int]) -> list[Bundle]:
    """The ranges between consecutive ``boundaries`` (sorted, from 0 to ``FULL_UPPER_BOUND``)."""
    return [
        Bundle(str(namespace), boundaries[i], boundaries[i + 1]) for i in range(len(boundaries) - 1)
    ]


def bundles_of(namespace: NamespaceName | str, count: int) -> list[Bundle]:
    """The ``count`` equal ranges of ``namespace`` (a namespace never split)."""
    return bundles_from(namespace, default_boundaries(count))


def bundle_at(topic: TopicName, boundaries: Sequence[int]) -> Bundle:
    """The bundle of ``topic`` among the ranges cut at ``boundaries``."""
    code = topic_hash(topic)
    # The last range also holds FULL_UPPER_BOUND itself, hence the min().
    index = min(bisect.bisect_right(boundaries, code), len(boundaries) - 1)
    return Bundle(str(topic.namespace_name), boundaries[index - 1], boundaries[index])


def bundle_of(topic: TopicName, count: int) -> Bundle:
    """The bundle ``topic`` belongs to in a namespace of ``count`` equal ranges."""
    return bundle_at(topic, default_boundaries(count))


def split_at(bundle: Bundle, points: Sequence[int]) -> list[Bundle]:
    """The pieces of ``bundle`` cut at ``points`` (each strictly inside it)."""
    if not points or any(not bundle.lower < p < bundle.upper for p in points):
        raise ValueError(f"{[hex(p) for p in points]} are not inside {bundle.name}")
    return bundles_from(bundle.namespace, sorted({bundle.lower, *points, bundle.upper}))


def check_boundaries(boundaries: Sequence[int]) -> None:
    """ValueError unless ``boundaries`` cut the full range into non-empty ranges."""
    if len(boundaries) < 2 or boundaries[0] != 0 or boundaries[-1] != FULL_UPPER_BOUND:
        raise ValueError("bundle boundaries must run from 0x00000000 to 0xffffffff")
    if any(b >= c for b, c in itertools.pairwise(boundaries)):
        raise ValueError("bundle boundaries must increase")


def parse_bundle_range(namespace: str, text: str) -> Bundle:
    """``0x00000000_0x40000000`` of ``namespace``; ValueError if it is not spelled so."""
    lower, sep, upper = text.partition("_")
    if not sep or not lower.startswith("0x") or not upper.startswith("0x"):
        raise ValueError(f"invalid bundle range {text!r}")
    bundle = Bundle(namespace, int(lower, 16), int(upper, 16))
    if not 0 <= bundle.lower < bundle.upper <= FULL_UPPER_BOUND:
        raise ValueError(f"invalid bundle range {text!r}")
    return bundle
