"""PIP-68 producer access modes for one topic, as a pure state machine.

The broker's ``Topic`` owns one ``ProducerAccess`` and asks it, for every PRODUCER command, whether
the producer may join (``request``), and tells it when a producer goes away (``remove``).  This
module does no I/O: it returns decisions and the caller performs them (persisting the topic epoch,
sending PRODUCER_SUCCESS / ERROR / CLOSE_PRODUCER frames, pinging connections).

Vocabulary
    handle      An opaque, hashable key the caller supplies for one producer *instance* (one
                PRODUCER command that may be admitted).  A handle is never reused: a client that
                reconnects gets a new handle.
    holder      The producer that owns the topic in an exclusive mode (Exclusive,
                WaitForExclusive once admitted, ExclusiveWithFencing).
    waiter      A WaitForExclusive producer queued (FIFO) until the topic is free.
    topic epoch Counter persisted in the ledger properties.  ``None`` means the topic never had an
                exclusive producer; the first one gets epoch 0 (Java: ``orElse(-1) + 1``).

Invariants (checked by the stateful test)
    * At most one holder; while there is a holder there are no Shared producers.
    * The topic epoch never decreases.
    * Every registered exclusive producer holds the current epoch; a producer that lost exclusive
      access is fenced (``is_fenced``) or unregistered, so ``may_publish`` is False forever for it.
    * No stuck waiters: waiters exist only while a holder or Shared producers exist, and every
      waiter's requested epoch (if any) is not stale.
    * Producer names are unique over registered producers and waiters.

Permanence of fencing.  A fenced handle stays fenced for the lifetime of this object.  A client
whose producer was fenced reconnects with the topic epoch it was given; fencing always moves the
epoch past it, so the reconnect is rejected with ProducerFenced ("Topic epoch has already moved").
A producer created from scratch (no topic_epoch) is a new writer and competes normally, as in Java.
Shared producers carry no epoch (Java ignores it for them), so a fenced Shared producer that
reconnects is refused with ProducerBusy while an exclusive producer holds the topic and may rejoin
once the topic is free, again as in Java.

Deliberate deviations from Java ``AbstractTopic`` (each fixes a hole, none changes a tested
outcome):
    * ExclusiveWithFencing checks a stale requested epoch *before* fencing anybody; Java fences
      everyone first and then fails, leaving a free topic behind.
    * When ExclusiveWithFencing fences somebody, the new epoch is always greater than the current
      one, so the fenced producers' epochs are stale even if the fencer asked for the current one.
    * WaitForExclusive with a stale requested epoch is rejected when it asks, not queued, and a
      waiter whose requested epoch becomes stale while it waits (an earlier waiter's promotion or
      ``increment_epoch`` moved the epoch past it) is failed with ProducerFenced at that moment.
      Java queues it and, on promotion, *lowers* the topic epoch to the stale value.
    * When the last Shared producer leaves, the first waiter is promoted; Java only promotes when
      an exclusive holder leaves, so such a waiter could wait forever.
    * The same-name liveness check also covers exclusive producers and waiters: a half-open
      connection of an exclusive holder no longer blocks its own reconnection.
    * ``increment_epoch`` (admin) fences the current holder at once and fails waiters whose
      requested epoch it made stale; Java only bumps the stored value and fences on reconnect.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from protocol.enums import ProducerAccessMode

H = TypeVar("H", bound=Hashable)
#: The fenced handles of every topic that has none (`ProducerAccess._fenced`).
_NO_HANDLES: frozenset[Any] = frozenset()

# Names of ``protocol.errors.ServerError`` members: the caller maps them with ``ServerError[code]``.
RejectCode: TypeAlias = Literal["ProducerBusy", "ProducerFenced"]


# --------------------------------------------------------------------------------------------
# Decisions returned to the caller
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admitted(Generic[H]):
    """The producer is registered and may publish.

    When ``epoch_changed`` the caller must persist ``topic_epoch`` durably *before* sending
    PRODUCER_SUCCESS.  It closes every producer in ``fence`` (CLOSE_PRODUCER) and answers every
    handle in ``failed_waiters`` (whose PRODUCER request is still pending) with ERROR
    ProducerFenced; it may do so at once, as Java does, since they are already out of this state
    machine and ``may_publish`` is False for them.  ``topic_epoch`` is the current epoch for
    Shared producers (maybe ``None``).  If persisting fails, call ``remove(handle)`` and answer an
    error: the in-memory epoch stays ahead of the stored one, which is harmless because no client
    was ever told that value.
    """

    topic_epoch: int | None
    epoch_changed: bool
    fence: tuple[H, ...] = ()
    failed_waiters: tuple[H, ...] = ()


@dataclass(frozen=True, slots=True)
class Queued:
    """WaitForExclusive on a busy topic: send PRODUCER_SUCCESS{producer_ready=false} at once.

    ``position`` counts the waiters ahead of this one (0 = promoted next).
    """

    position: int


@dataclass(frozen=True, slots=True)
class Rejected:
    """Answer the PRODUCER command with ERROR ``code`` and ``message``; nothing was registered."""

    code: RejectCode
    message: str


@dataclass(frozen=True, slots=True)
class CheckLiveness(Generic[H]):
    """A producer with the same name exists on another connection.

    The caller pings that producer's connection.  If it is dead, the caller calls
    ``remove(existing)`` (handling any promotion it returns) and then ``request`` again.  If it is
    alive, the caller calls ``request`` again with ``confirmed_alive=existing``.
    """

    existing: H


Decision: TypeAlias = Admitted[H] | Queued | Rejected | CheckLiveness[H]


@dataclass(frozen=True, slots=True)
class Promotion(Generic[H]):
    """A waiter became the holder: persist ``topic_epoch`` when ``epoch_changed``, then send the
    second PRODUCER_SUCCESS (same request_id, producer_ready=true, topic_epoch), and answer the
    ``failed_waiters`` (whose requested epoch this promotion made stale) with ProducerFenced."""

    handle: H
    topic_epoch: int
    epoch_changed: bool
    failed_waiters: tuple[H, ...] = ()


@dataclass(frozen=True, slots=True)
class EpochBump(Generic[H]):
    """Result of ``increment_epoch``: persist ``topic_epoch`` (which already includes a promotion),
    close ``fence``, fail ``failed_waiters`` with ProducerFenced, then carry out ``promotion``."""

    topic_epoch: int
    fence: tuple[H, ...]
    failed_waiters: tuple[H, ...]
    promotion: Promotion[H] | None


@dataclass(frozen=True, slots=True)
class AccessStats:
    topic_epoch: int | None
    holder: str | None
    waiters: tuple[str, ...]
    shared_producers: int
    fenced: int


# --------------------------------------------------------------------------------------------
# Internal records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Producer:
    name: str
    mode: ProducerAccessMode
    connection: Hashable
    # Epoch granted at admission (exclusive modes) or the topic epoch at that time (Shared).
    topic_epoch: int | None


@dataclass(frozen=True, slots=True)
class _Waiter:
    name: str
    connection: Hashable
    requested_topic_epoch: int | None


_EXCLUSIVE_MODES = frozenset(
    {
        ProducerAccessMode.Exclusive,
        ProducerAccessMode.WaitForExclusive,
        ProducerAccessMode.ExclusiveWithFencing,
    }
)


class ProducerAccess(Generic[H]):
    """Access-mode bookkeeping of one topic (see the module docstring for the invariants)."""

    def __init__(self, topic_epoch: int | None = None) -> None:
        """``topic_epoch``: the value persisted in the ledger properties, or ``None`` if absent."""
        if topic_epoch is not None and topic_epoch < 0:
            raise ValueError(f"topic epoch must be >= 0, got {topic_epoch}")
        self._epoch = topic_epoch
        self._producers: dict[H, _Producer] = {}
        self._holder: H | None = None
        # A dict keeps insertion (FIFO) order and removes a disconnected waiter in O(1).
        self._waiters: dict[H, _Waiter] = {}
        self._by_name: dict[str, H] = {}
        # Fenced handles not removed yet: a set from the first fencing on (an empty set costs
        # 216 B, and most topics never fence anybody; issue #26).
        self._fenced: set[H] | frozenset[H] = _NO_HANDLES
        self._fenced_total = 0

    # ---------------------------------------------------------------- queries

    @property
    def topic_epoch(self) -> int | None:
        return self._epoch

    @property
    def holder(self) -> H | None:
        return self._holder

    def is_registered(self, handle: H) -> bool:
        return handle in self._producers

    def is_waiting(self, handle: H) -> bool:
        return handle in self._waiters

    def is_fenced(self, handle: H) -> bool:
        return handle in self._fenced

    def may_publish(self, handle: H) -> bool:
        """Data-path check at append time: only registered, unfenced producers whose exclusive
        epoch is still current may reach the ledger."""
        producer = self._producers.get(handle)
        if producer is None or handle in self._fenced:
            return False
        if producer.mode is ProducerAccessMode.Shared:
            return True
        return producer.topic_epoch == self._epoch

    def stats(self) -> AccessStats:
        holder = self._producers[self._holder].name if self._holder is not None else None
        return AccessStats(
            topic_epoch=self._epoch,
            holder=holder,
            waiters=tuple(waiter.name for waiter in self._waiters.values()),
            shared_producers=sum(
                p.mode is ProducerAccessMode.Shared for p in self._producers.values()
            ),
            fenced=self._fenced_total,
        )

    # ---------------------------------------------------------------- commands

    def request(
        self,
        handle: H,
        name: str,
        mode: ProducerAccessMode,
        connection: Hashable,
        requested_topic_epoch: int | None = None,
        *,
        confirmed_alive: H | None = None,
    ) -> Decision[H]:
        """Decide on a PRODUCER command (Java ``incrementTopicEpochIfNeeded`` +
        ``internalAddProducer``).

        ``connection`` identifies the client connection (compared by equality).
        ``confirmed_alive`` is the handle a previous ``CheckLiveness`` named, after the caller
        found its connection alive.
        """
        if handle in self._producers or handle in self._waiters:
            raise ValueError(f"producer handle {handle!r} is already known")
        if handle in self._fenced:
            return Rejected("ProducerFenced", "Producer was fenced")

        if mode is not ProducerAccessMode.ExclusiveWithFencing:
            # Same name on another connection: the old one may be a dead client (kill -9,
            # half-open TCP) that nobody noticed yet; Java pings it before refusing.
            existing = self._by_name.get(name)
            if (
                existing is not None
                and existing != confirmed_alive
                and self._connection_of(existing) != connection
            ):
                return CheckLiveness(existing)

        decision: Queued | Rejected | None
        match mode:
            case ProducerAccessMode.Shared:
                decision = self._request_shared()
            case ProducerAccessMode.Exclusive:
                decision = self._request_exclusive(requested_topic_epoch)
            case ProducerAccessMode.WaitForExclusive:
                decision = self._request_wait_for_exclusive(requested_topic_epoch)
            case ProducerAccessMode.ExclusiveWithFencing:
                return self._take_over_with_fencing(handle, name, connection, requested_topic_epoch)

        if isinstance(decision, Rejected):
            return decision
        # The access mode allows it; the name must still be free (Java checks names last).
        if name in self._by_name:
            return Rejected("ProducerBusy", f"Producer with name '{name}' is already connected")
        if isinstance(decision, Queued):
            self._waiters[handle] = _Waiter(name, connection, requested_topic_epoch)
            self._by_name[name] = handle
            return Queued(len(self._waiters) - 1)
        return self._admit(handle, name, mode, connection, requested_topic_epoch)

    def remove(self, handle: H) -> Promotion[H] | None:
        """A producer closed, was closed by the broker, or its connection dropped.

        Idempotent; unknown handles are ignored.  Returns the waiter promoted as a consequence.
        A fenced handle is forgotten here: the caller is done with it, and keeping it would keep
        every fenced producer (and through it its connection) reachable for the topic's life.
        """
        if handle in self._fenced:
            self._forget_fenced(handle)
        waiter = self._waiters.pop(handle, None)
        if waiter is not None:
            del self._by_name[waiter.name]
            self._shrink_if_empty()
            return None
        producer = self._producers.pop(handle, None)
        if producer is None:
            return None
        del self._by_name[producer.name]
        if handle == self._holder:
            self._holder = None
        promotion = self._promote_if_free()
        self._shrink_if_empty()
        return promotion

    def _forget_fenced(self, handle: H) -> None:
        fenced = self._fenced
        if isinstance(fenced, set):
            fenced.discard(handle)
            if not fenced:
                self._fenced = _NO_HANDLES

    def _mark_fenced(self, handle: H) -> None:
        if not isinstance(self._fenced, set):
            self._fenced = set()
        self._fenced.add(handle)
        self._fenced_total += 1

    def _shrink_if_empty(self) -> None:
        """Nobody left: fresh empty dicts. A dict keeps its grown table when emptied (232 B
        after one producer came and went, against 64 B), and a topic is idle most of its life
        (issue #26)."""
        if not (self._producers or self._waiters or self._by_name):
            self._producers, self._waiters, self._by_name = {}, {}, {}

    def increment_epoch(self) -> EpochBump[H]:
        """Admin bump of the topic epoch (Java ``incrementTopicEpoch``; test X4).

        The holder's epoch becomes stale, so it is fenced now rather than on its next reconnect;
        waiters that asked for the old epoch are failed.  Shared producers never held an epoch
        and are left alone.
        """
        self._epoch = self._epoch_floor() + 1
        fence: tuple[H, ...] = ()
        if self._holder is not None:
            fence = (self._holder,)
            self._fence_registered(self._holder)
        failed = self._fail_stale_waiters()
        promotion = self._promote_if_free()
        return EpochBump(self._epoch, fence, failed, promotion)

    # ---------------------------------------------------------------- per-mode rules

    def _request_shared(self) -> Rejected | None:
        if self._holder is not None or self._waiters:
            return Rejected(
                "ProducerBusy", f"Topic has an existing exclusive producer: {self._owner_name()}"
            )
        return None

    def _request_exclusive(self, requested: int | None) -> Rejected | None:
        if self._holder is not None or self._waiters:
            return Rejected(
                "ProducerFenced", f"Topic has an existing exclusive producer: {self._owner_name()}"
            )
        if self._producers:
            return Rejected("ProducerFenced", "Topic has existing shared producers")
        return self._reject_if_stale(requested)

    def _request_wait_for_exclusive(self, requested: int | None) -> Queued | Rejected | None:
        # Checked before queueing: the epoch never decreases, so a stale waiter could only ever
        # be failed later.
        stale = self._reject_if_stale(requested)
        if stale is not None:
            return stale
        if self._holder is not None or self._producers or self._waiters:
            return Queued(len(self._waiters))
        return None

    def _take_over_with_fencing(
        self, handle: H, name: str, connection: Hashable, requested: int | None
    ) -> Admitted[H] | Rejected:
        stale = self._reject_if_stale(requested)
        if stale is not None:
            return stale
        failed = tuple(self._waiters)
        # Waiters go first so that closing the registered producers promotes nobody.
        for waiter in failed:
            self._fail_waiter(waiter)
        fence = tuple(self._producers)
        for producer in fence:
            self._fence_registered(producer)
        epoch = self._next_epoch(requested)
        if (fence or failed) and epoch <= self._epoch_floor():
            # Whoever was fenced holds an epoch <= the current one; move past it so that their
            # reconnection with that epoch is refused forever.
            epoch = self._epoch_floor() + 1
        admitted = self._register_exclusive(
            handle, name, ProducerAccessMode.ExclusiveWithFencing, connection, epoch
        )
        return Admitted(admitted.topic_epoch, admitted.epoch_changed, fence, failed)

    # ---------------------------------------------------------------- transitions

    def _admit(
        self,
        handle: H,
        name: str,
        mode: ProducerAccessMode,
        connection: Hashable,
        requested: int | None,
    ) -> Admitted[H]:
        if mode is ProducerAccessMode.Shared:
            self._producers[handle] = _Producer(name, mode, connection, self._epoch)
            self._by_name[name] = handle
            return Admitted(self._epoch, epoch_changed=False)
        return self._register_exclusive(handle, name, mode, connection, self._next_epoch(requested))

    def _register_exclusive(
        self, handle: H, name: str, mode: ProducerAccessMode, connection: Hashable, epoch: int
    ) -> Admitted[H]:
        assert mode in _EXCLUSIVE_MODES
        assert self._holder is None, "one holder at a time"
        assert not self._producers, "an exclusive producer writes alone"
        assert epoch >= self._epoch_floor(), "the topic epoch must never decrease"
        changed = epoch != self._epoch
        self._epoch = epoch
        self._producers[handle] = _Producer(name, mode, connection, epoch)
        self._by_name[name] = handle
        self._holder = handle
        return Admitted(epoch, changed)

    def _promote_if_free(self) -> Promotion[H] | None:
        """Hand the topic to the first waiter once no holder and no Shared producer is left."""
        if self._holder is not None or self._producers or not self._waiters:
            return None
        handle = next(iter(self._waiters))
        waiter = self._waiters.pop(handle)
        del self._by_name[waiter.name]
        # The waiter is not stale: waiters are checked on arrival, and every later epoch move
        # that leaves waiters behind (a promotion, increment_epoch) fails the ones it outran.
        admitted = self._register_exclusive(
            handle,
            waiter.name,
            ProducerAccessMode.WaitForExclusive,
            waiter.connection,
            self._next_epoch(waiter.requested_topic_epoch),
        )
        assert admitted.topic_epoch is not None
        failed = self._fail_stale_waiters()
        return Promotion(handle, admitted.topic_epoch, admitted.epoch_changed, failed)

    def _fence_registered(self, handle: H) -> None:
        producer = self._producers.pop(handle)
        del self._by_name[producer.name]
        if handle == self._holder:
            self._holder = None
        self._mark_fenced(handle)

    def _fail_stale_waiters(self) -> tuple[H, ...]:
        """Fail the waiters whose requested epoch the topic epoch has just moved past."""
        stale = tuple(
            handle
            for handle, waiter in self._waiters.items()
            if self._is_stale(waiter.requested_topic_epoch)
        )
        for handle in stale:
            self._fail_waiter(handle)
        return stale

    def _fail_waiter(self, handle: H) -> None:
        waiter = self._waiters.pop(handle)
        del self._by_name[waiter.name]
        self._mark_fenced(handle)

    # ---------------------------------------------------------------- helpers

    def _epoch_floor(self) -> int:
        """The current epoch, with "never had one" as -1 (Java ``topicEpoch.orElse(-1L)``)."""
        return -1 if self._epoch is None else self._epoch

    def _next_epoch(self, requested: int | None) -> int:
        # A reconnecting producer keeps its epoch (X3).  A requested epoch above ours means our
        # stored epoch was lost (topic deleted and recreated, X5); adopting it keeps the epoch
        # monotonic as the client sees it.  Java does the same (setTopicEpoch).
        if requested is not None:
            return requested
        return self._epoch_floor() + 1

    def _is_stale(self, requested: int | None) -> bool:
        return requested is not None and requested < self._epoch_floor()

    def _reject_if_stale(self, requested: int | None) -> Rejected | None:
        if not self._is_stale(requested):
            return None
        return Rejected(
            "ProducerFenced",
            f"Topic epoch has already moved. Current epoch: {self._epoch}, "
            f"Producer epoch: {requested}",
        )

    def _owner_name(self) -> str:
        if self._holder is not None:
            return self._producers[self._holder].name
        # Only waiters (behind Shared producers): name the first in line.
        return next(iter(self._waiters.values())).name

    def _connection_of(self, handle: H) -> Hashable:
        producer = self._producers.get(handle)
        if producer is not None:
            return producer.connection
        return self._waiters[handle].connection
