"""Pulsar topic names.

Accepted spellings (the ones Pulsar clients and admin tools use):

* ``persistent://tenant/namespace/topic`` (the full name),
* ``tenant/namespace/topic`` (domain completed to ``persistent``),
* ``topic`` (completed to ``persistent://public/default/topic``).

A partition of a partitioned topic is the topic whose local name ends in ``-partition-N``;
``TopicName.partition`` is N (or -1) and ``partitioned_topic_name`` strips the suffix.

Rejected with ``InvalidTopicNameError``: ``non-persistent://`` topics (Magnetar stores every
topic), the legacy four-part form with a cluster segment, empty segments, and tenant/namespace
names outside Pulsar's character set (letters, digits, ``_ - = : .``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PERSISTENT = "persistent"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

_NAME_SEGMENT = re.compile(r"[-=:.\w]+", re.ASCII)
_PARTITION_INDEX = re.compile(r"[0-9]+", re.ASCII)


class InvalidTopicNameError(ValueError):
    """The string is not a topic name Magnetar serves."""


@dataclass(frozen=True, slots=True)
class TopicName:
    """A parsed, fully qualified persistent topic name."""

    tenant: str
    namespace: str
    local_name: str
    domain: str = PERSISTENT

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse any accepted spelling into a ``TopicName``.

        Raises:
            InvalidTopicNameError: the name is malformed, legacy, or not persistent.
        """
        domain, separator, rest = name.partition("://")
        if not separator:
            domain, rest = PERSISTENT, _complete_short_name(name)
        if domain != PERSISTENT:
            raise InvalidTopicNameError(
                f"{name!r}: only persistent:// topics are supported (got domain {domain!r})"
            )
        parts = rest.split("/")
        if len(parts) != 3:
            raise InvalidTopicNameError(
                f"{name!r}: expected persistent://<tenant>/<namespace>/<topic>"
            )
        tenant, namespace, local_name = parts
        for label, value in (("tenant", tenant), ("namespace", namespace)):
            if not _NAME_SEGMENT.fullmatch(value):
                raise InvalidTopicNameError(f"{name!r}: invalid {label} name {value!r}")
        if not local_name:
            raise InvalidTopicNameError(f"{name!r}: empty topic name")
        return cls(tenant, namespace, local_name)

    @property
    def full_name(self) -> str:
        """``persistent://tenant/namespace/local_name`` (partition suffix included)."""
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        """``tenant/namespace``."""
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition(self) -> int:
        """N for a ``-partition-N`` local name, else -1."""
        base, separator, index = self.local_name.rpartition(PARTITION_SUFFIX)
        if separator and base and _PARTITION_INDEX.fullmatch(index):
            return int(index)
        return -1

    @property
    def is_partition(self) -> bool:
        """True for one partition of a partitioned topic."""
        return self.partition >= 0

    @property
    def partitioned_topic_name(self) -> str:
        """Full name of the partitioned topic this partition belongs to (itself if none)."""
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self._base_local_name}"

    def with_partition(self, index: int) -> TopicName:
        """Return the topic of partition ``index`` of this (partitioned) topic."""
        if index < 0:
            raise ValueError(f"partition index must be >= 0, got {index}")
        local_name = f"{self._base_local_name}{PARTITION_SUFFIX}{index}"
        return TopicName(self.tenant, self.namespace, local_name, self.domain)

    @property
    def _base_local_name(self) -> str:
        if self.partition < 0:
            return self.local_name
        return self.local_name.rpartition(PARTITION_SUFFIX)[0]

    def __str__(self) -> str:
        return self.full_name


def _complete_short_name(name: str) -> str:
    """``topic`` -> ``public/default/topic``; ``t/ns/topic`` stays as it is."""
    if "/" not in name:
        return f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{name}"
    if name.count("/") == 2:
        return name
    raise InvalidTopicNameError(
        f"{name!r}: a short topic name is either <topic> or <tenant>/<namespace>/<topic>"
    )
