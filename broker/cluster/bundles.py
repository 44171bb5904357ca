"""Namespace bundles: equal hash ranges of topic names, the unit of ownership (as Pulsar).

A namespace's 2^32 hash space is cut into ``defaultNumberOfNamespaceBundles`` ranges; a topic
belongs to the range holding Murmur3-32 of its full name (a partition's own name, so the
partitions of one topic spread). Ranges are spelled as Pulsar spells them:
``0x00000000_0x40000000`` (lower bound inclusive, upper exclusive; the last one ends at
``0xffffffff`` inclusive, Pulsar's ``FULL_UPPER_BOUND``).
"""

from __future__ import annotations

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


def bundles_of(namespace: NamespaceName | str, count: int) -> list[Bundle]:
    """The ``count`` equal ranges of ``namespace`` (Pulsar's ``NamespaceBundleFactory``)."""
    size = (FULL_UPPER_BOUND + 1) // count
    bounds = [i * size for i in range(count)] + [FULL_UPPER_BOUND]
    return [Bundle(str(namespace), bounds[i], bounds[i + 1]) for i in range(count)]


def bundle_of(topic: TopicName, count: int) -> Bundle:
    """The bundle ``topic`` belongs to."""
    code = topic_hash(topic)
    for bundle in bundles_of(topic.namespace_name, count):
        if bundle.contains(code):
            return bundle
    raise AssertionError(f"hash {code:#x} outside the full range")  # the ranges cover 2^32


def parse_bundle_range(namespace: str, text: str) -> Bundle:
    """``0x00000000_0x40000000`` of ``namespace``; ValueError if it is not spelled so."""
    lower, sep, upper = text.partition("_")
    if not sep or not lower.startswith("0x") or not upper.startswith("0x"):
        raise ValueError(f"invalid bundle range {text!r}")
    bundle = Bundle(namespace, int(lower, 16), int(upper, 16))
    if not 0 <= bundle.lower < bundle.upper <= FULL_UPPER_BOUND:
        raise ValueError(f"invalid bundle range {text!r}")
    return bundle
