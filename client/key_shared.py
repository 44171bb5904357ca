"""The official ``pulsar.ConsumerKeySharedPolicy`` and ``pulsar.KeySharedMode``.

A Key_Shared consumer tells the broker, in SUBSCRIBE's ``keySharedMeta``, how the subscription
splits the key-hash space ``[0, 65535]`` (Murmur3 of the ordering key, else the key, modulo
65536):

* ``KeySharedMode.AutoSplit`` (the default): the broker splits it among the consumers;
* ``KeySharedMode.Sticky``: the consumer declares its own inclusive ``sticky_ranges``; the broker
  refuses ranges another consumer of the subscription holds (``ConsumerAssignError``);

and whether it may deliver out of order (``allow_out_of_order_delivery``): when false, a consumer
that takes over a key gets no message of it until the previous owner has acknowledged what it
holds of that key.

Every consumer of a subscription must use the same mode and out-of-order flag (``ConsumerBusy``
otherwise). The checks here are the official client's (C++ ``KeySharedPolicy``), with its
messages: a Sticky policy needs ranges; ranges must be non-empty, inside ``[0, 65535]`` and must
not overlap each other. A range given upside down passes here, as there, and the broker refuses
it.
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol import pb
from protocol.commands.consumers import key_shared_meta
from protocol.enums import KeySharedMode, SubType

__all__ = ["ConsumerKeySharedPolicy", "KeySharedMode"]

_HASH_MAX = 65535


def _checked_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    checked = [(int(start), int(end)) for start, end in ranges]
    if not checked:
        raise ValueError("Ranges for KeyShared policy must not be empty.")
    for start, end in checked:
        if not (0 <= start <= _HASH_MAX and 0 <= end <= _HASH_MAX):
            raise ValueError(f"KeySharedPolicy Exception: Ranges must be [0, {_HASH_MAX}].")
    for index, (start, end) in enumerate(checked):
        for other_start, other_end in checked[index + 1 :]:
            if start <= other_end and other_start <= end:
                raise ValueError("Ranges for KeyShared policy with overlap.")
    return checked


class ConsumerKeySharedPolicy:
    """How a Key_Shared consumer shares keys (``subscribe(..., key_shared_policy=...)``)."""

    __slots__ = ("_allow_out_of_order_delivery", "_mode", "_ranges")

    def __init__(
        self,
        key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit,
        allow_out_of_order_delivery: bool = False,
        sticky_ranges: list[tuple[int, int]] | None = None,
    ) -> None:
        """
        Args:
            key_shared_mode: ``KeySharedMode.AutoSplit`` or ``KeySharedMode.Sticky``.
            allow_out_of_order_delivery: let a consumer taking over a key get its messages at
                once, before the previous owner acknowledged what it holds of it.
            sticky_ranges: the inclusive hash ranges ``(start, end)`` in ``[0, 65535]`` this
                consumer owns; required in Sticky mode.

        Raises:
            ValueError: Sticky without ranges, or ranges empty, out of bounds or overlapping.
        """
        mode = KeySharedMode(int(key_shared_mode))
        if mode == KeySharedMode.Sticky and sticky_ranges is None:
            raise ValueError(
                "When using key_shared_mode = KeySharedMode.Sticky you must also provide "
                "sticky_ranges"
            )
        self._mode = mode
        self._allow_out_of_order_delivery = bool(allow_out_of_order_delivery)
        self._ranges = [] if sticky_ranges is None else _checked_ranges(sticky_ranges)

    @property
    def key_shared_mode(self) -> KeySharedMode:
        """The key shared mode."""
        return self._mode

    @property
    def allow_out_of_order_delivery(self) -> bool:
        """Whether out of order delivery is allowed."""
        return self._allow_out_of_order_delivery

    @property
    def sticky_ranges(self) -> list[tuple[int, int]]:
        """The sticky ranges (a copy; empty when none were given)."""
        return list(self._ranges)

    def policy(self) -> ConsumerKeySharedPolicy:
        """The policy itself (the official one returns its C++ object; there is none here)."""
        return self

    def to_pb(self) -> pb.KeySharedMeta:
        """SUBSCRIBE's ``keySharedMeta``: ranges in Sticky mode only, as the C++ client sends."""
        ranges = self._ranges if self._mode == KeySharedMode.Sticky else ()
        return key_shared_meta(
            self._mode, ranges, allow_out_of_order_delivery=self._allow_out_of_order_delivery
        )

    def __repr__(self) -> str:
        return (
            f"ConsumerKeySharedPolicy({self._mode.name}, allow_out_of_order_delivery="
            f"{self._allow_out_of_order_delivery}, sticky_ranges={self._ranges})"
        )


def key_shared_meta_for(
    consumer_type: int, policy: ConsumerKeySharedPolicy | None
) -> pb.KeySharedMeta | None:
    """What a SUBSCRIBE carries as ``keySharedMeta``: a Key_Shared consumer always sends one
    (the default policy when none was given), as the C++ client does; other types none."""
    if consumer_type != SubType.Key_Shared:
        return None
    return (policy or _DEFAULT).to_pb()


_DEFAULT = ConsumerKeySharedPolicy()
