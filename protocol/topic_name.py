"""Pulsar topic and namespace names, and the folder name each part is stored under.

Accepted spellings of a topic (the ones Pulsar clients and admin tools use):

* ``persistent://tenant/namespace/topic`` (the full name),
* ``tenant/namespace/topic`` (domain completed to ``persistent``),
* ``topic`` (completed to ``persistent://public/default/topic``).

A partition of a partitioned topic is the topic whose local name ends in ``-partition-N``;
``TopicName.partition`` is N (or -1) and ``partitioned_topic_name`` strips the suffix.

Rules (Pulsar's ``NamedEntity``, ``NamespaceName`` and ``TopicName``, plus what a name needs to
be a safe folder name). Everything else is refused with ``InvalidTopicNameError``:

1. Tenant and namespace: one or more of ``[-=:.\\w]`` (ASCII ``\\w``, as in Java), exactly
   Pulsar's ``NamedEntity`` pattern. The legacy ``tenant/cluster/namespace`` form is refused.
2. Local topic name: Pulsar accepts any non-empty string here. We refuse what could change the
   meaning of a path or of a log line: ``/`` and ``\\`` (path separators), control characters
   (C0, DEL, C1, which include NUL), the Unicode line and paragraph separators, and lone
   surrogates (no UTF-8 spelling, so no file name either).
3. Every part: not ``.`` or ``..`` (they name the folder itself or its parent), and a folder
   name (``folder_name``) of at most 255 bytes, the file-name limit of ext4, XFS, btrfs and APFS.
   Longer names are refused rather than hashed: the folder name stays a pure, reversible
   function of the name, so a listing needs no extra metadata file and two names can never meet
   in one folder. An ASCII name of lower-case letters, digits and ``-_.`` may be 255 characters
   long; every other byte costs three (``%XX``).
4. Only ``persistent://`` topics: Magnetar stores every topic.

``folder_name`` keeps ``[a-z0-9._-]`` and writes every other UTF-8 byte as ``%XX`` (upper-case
hex), upper-case ASCII letters included. So the mapping is injective even on a case-insensitive
file system (APFS, NTFS: ``Orders`` and ``orders`` must not share a ledger), folder names are
plain ASCII (no Unicode normalization by the file system, no ``/`` or NUL), and
``part_from_folder_name`` inverts it exactly, refusing any spelling ``folder_name`` never writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PERSISTENT = "persistent"
#: Pulsar's in-memory topics (issue #14). Only callers that serve them opt in
#: (``TopicName.parse(..., allow_non_persistent=True)``): everything else stores topics.
NON_PERSISTENT = "non-persistent"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"
#: Longest file name (bytes) of the common Linux and macOS file systems.
MAX_FOLDER_NAME_BYTES = 255

_NAMED_ENTITY = re.compile(r"[-=:.\w]+", re.ASCII)
_PARTITION_INDEX = re.compile(r"[0-9]+", re.ASCII)
# Path separators, C0 + DEL + C1 controls, line/paragraph separators, lone surrogates.
_FORBIDDEN_IN_LOCAL_NAME = re.compile("[/\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_SELF_OR_PARENT = frozenset({".", ".."})
_FOLDER_SAFE_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-_.")
_FOLDER_SPELLING = tuple(
    chr(byte) if byte in _FOLDER_SAFE_BYTES else f"%{byte:02X}" for byte in range(256)
)
_SHOWN_CHARS = 120


class InvalidTopicNameError(ValueError):
    """The string is not a topic or namespace name Magnetar serves."""


def folder_name(part: str) -> str:
    """The folder name one name part (tenant, namespace or local name) is stored under.

    ``[a-z0-9._-]`` stay as they are; every other UTF-8 byte becomes ``%XX``. Only meaningful
    for a validated part (no surrogates, not ``.`` or ``..``).
    """
    return "".join([_FOLDER_SPELLING[byte] for byte in part.encode()])


def part_from_folder_name(folder: str) -> str | None:
    """The name part stored under ``folder``, or None if ``folder_name`` never writes ``folder``
    (another spelling, a stray file, a folder from a build with another encoding)."""
    if not folder.isascii():
        return None
    literal, *escapes = folder.split("%")
    stored = bytearray(literal.encode())
    for escape in escapes:
        if len(escape) < 2:
            return None
        try:
            stored += bytes.fromhex(escape[:2])
        except ValueError:
            return None
        stored += escape[2:].encode()
    try:
        part = stored.decode()
    except UnicodeDecodeError:
        return None
    # The decoding above is lenient (lower-case hex...): accept only what folder_name writes.
    return part if folder_name(part) == folder else None


def check_tenant_name(tenant: str) -> None:
    """Raise ``InvalidTopicNameError`` unless ``tenant`` is a valid tenant name."""
    _check_named_entity("tenant", tenant, tenant)


@dataclass(frozen=True, slots=True)
class NamespaceName:
    """A validated ``tenant/namespace``."""

    tenant: str
    namespace: str

    def __post_init__(self) -> None:
        shown = f"{self.tenant}/{self.namespace}"
        _check_named_entity("tenant", self.tenant, shown)
        _check_named_entity("namespace", self.namespace, shown)

    @classmethod
    def parse(cls, name: str) -> NamespaceName:
        """Parse ``tenant/namespace``.

        Raises:
            InvalidTopicNameError: not two valid parts.
        """
        parts = name.split("/")
        if len(parts) != 2:
            raise InvalidTopicNameError(f"{_shown(name)}: expected <tenant>/<namespace>")
        return cls(parts[0], parts[1])

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


@dataclass(frozen=True, slots=True)
class TopicName:
    """A validated, fully qualified persistent topic name."""

    tenant: str
    namespace: str
    local_name: str
    domain: str = PERSISTENT

    def __post_init__(self) -> None:
        shown = f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"
        if self.domain not in (PERSISTENT, NON_PERSISTENT):
            raise InvalidTopicNameError(
                f"{_shown(shown)}: only persistent:// topics are supported"
                f" (got domain {_shown(self.domain)})"
            )
        _check_named_entity("tenant", self.tenant, shown)
        _check_named_entity("namespace", self.namespace, shown)
        _check_local_name(self.local_name, shown)

    @classmethod
    def parse(cls, name: str, *, allow_non_persistent: bool = False) -> TopicName:
        """Parse any accepted spelling into a ``TopicName``.

        ``allow_non_persistent``: accept ``non-persistent://`` names too (their ``domain`` is
        ``NON_PERSISTENT``); only code that serves in-memory topics passes it.

        Raises:
            InvalidTopicNameError: the name is malformed, legacy, unsafe, or not persistent.
        """
        domain, separator, rest = name.partition("://")
        if not separator:
            domain, rest = PERSISTENT, _complete_short_name(name)
        if domain == NON_PERSISTENT and allow_non_persistent:
            pass
        elif domain != PERSISTENT:
            raise InvalidTopicNameError(
                f"{_shown(name)}: only persistent:// topics are supported"
                f" (got domain {_shown(domain)})"
            )
        parts = rest.split("/")
        if len(parts) != 3:
            raise InvalidTopicNameError(
                f"{_shown(name)}: expected persistent://<tenant>/<namespace>/<topic>"
            )
        tenant, namespace, local_name = parts
        return cls(tenant, namespace, local_name, domain)

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
        """Return the topic of partition ``index`` of this (partitioned) topic.

        Raises:
            InvalidTopicNameError: the partition's name would be too long.
        """
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
        f"{_shown(name)}: a short topic name is either <topic> or <tenant>/<namespace>/<topic>"
    )


def _check_named_entity(label: str, value: str, name: str) -> None:
    if not _NAMED_ENTITY.fullmatch(value):
        raise InvalidTopicNameError(
            f"{_shown(name)}: invalid {label} name {_shown(value)}"
            " (allowed: letters, digits and - _ = : .)"
        )
    _check_folder_part(label, value, name)


def _check_local_name(value: str, name: str) -> None:
    if not value:
        raise InvalidTopicNameError(f"{_shown(name)}: empty topic name")
    forbidden = _FORBIDDEN_IN_LOCAL_NAME.search(value)
    if forbidden is not None:
        raise InvalidTopicNameError(
            f"{_shown(name)}: the topic name may not contain {forbidden.group()!r}"
        )
    _check_folder_part("topic", value, name)


def _check_folder_part(label: str, value: str, name: str) -> None:
    if value in _SELF_OR_PARENT:
        raise InvalidTopicNameError(f"{_shown(name)}: {value!r} is not a valid {label} name")
    size = len(folder_name(value))
    if size > MAX_FOLDER_NAME_BYTES:
        raise InvalidTopicNameError(
            f"{_shown(name)}: {label} name too long ({size} bytes stored,"
            f" limit {MAX_FOLDER_NAME_BYTES}; characters other than a-z 0-9 - _ . count 3 per"
            " UTF-8 byte)"
        )


def _shown(text: str) -> str:
    """``repr`` (control characters escaped), clipped: messages go to logs and ERROR frames."""
    if len(text) <= _SHOWN_CHARS:
        return repr(text)
    return repr(text[:_SHOWN_CHARS]) + f"... ({len(text)} characters)"
