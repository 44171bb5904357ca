"""Producers of a topic: admission under PIP-68 access modes, and fencing.

``ProducerAccess`` (pure) decides; ``ProducerRegistry`` carries the decisions out:

* it closes fenced producers (CLOSE_PRODUCER) and fails fenced waiters as soon as the decision is
  taken: the state machine has already stopped them at the data path (``may_publish``);
* before an exclusive producer is told it holds the topic (PRODUCER_SUCCESS, or the second
  PRODUCER_SUCCESS of a promoted WaitForExclusive waiter) it waits until every entry the topic
  accepted from earlier writers is settled (durable, or failed back to its client; the topic's
  ``WriteBarrier``, woken by the group commit itself), then makes the topic epoch durable in the
  ledger properties;
* it pings an old connection before evicting a same-name producer (Java
  ``checkConnectionLiveness``).

Invariants
    * Epoch before grant: no client is ever told a topic epoch that is not on disk, so after a
      crash the stored epoch is at least every epoch a producer holds (issue #6, item 2).
    * The stored epoch never decreases: writes are serialized and a write never lowers it, even
      when two grants persist concurrently.
    * Complete prefix: when a new holder is told it holds the topic, everything an earlier writer
      got accepted (staged or appended) is durable or failed, so a reader it starts sees the
      whole log its predecessors left (the PIP-68 "rebuild state, then write" pattern depends on
      this), and none of their entries becomes durable after the grant (issue #10, item 4).
    * A producer that lost the topic while its grant was being persisted is never told it holds
      the topic: it gets ProducerFenced instead.
    * If a grant cannot be persisted, the producer is withdrawn (and the next waiter, if any, is
      considered) and the request fails with PersistenceError, which the client retries.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

from broker.blocking import run_to_completion
from broker.errors import BrokerError, PersistenceError, ProducerBusy, ProducerFenced
from broker.publish.producer_access import (
    Admitted,
    CheckLiveness,
    ProducerAccess,
    Promotion,
    Queued,
    Rejected,
)
from broker.publish.write_barrier import WriteBarrier
from broker.storage import Ledger
from protocol.enums import ProducerAccessMode

log = logging.getLogger(__name__)

TOPIC_EPOCH_PROPERTY = "pulsar.topic_epoch"

# How long a grant waits for the previous writers' entries to settle.  The group commit
# normally takes milliseconds; this only bounds a stuck flush, after which the request fails with
# PersistenceError (retryable) rather than hanging.
PREVIOUS_WRITES_TIMEOUT_S = 10.0


class ProducerSink(Protocol):
    """What the topic needs from the producer's connection."""

    def close_producer(self, producer: Producer) -> None:
        """Forget the producer id, then send CLOSE_PRODUCER (the client reconnects)."""

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        """Second PRODUCER_SUCCESS (same request id, producer_ready=true) for a waiter."""

    def producer_failed(self, producer: Producer, error: BrokerError) -> None:
        """ERROR for a still pending PRODUCER request (a waiter that lost)."""

    async def check_alive(self) -> bool:
        """Ping the connection; False if it does not answer in time."""


@dataclass(eq=False)
class Producer:
    """One admitted (or waiting) producer. Identity is the object: ids are reused by clients."""

    producer_id: int
    name: str
    mode: ProducerAccessMode
    sink: ProducerSink
    connection_key: object
    request_id: int
    user_provided_name: bool = True
    topic_epoch: int | None = None
    ready: bool = False
    fenced: bool = False
    msg_in: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)


#: The producers of every topic that has none (`ProducerRegistry.producers`).
_NO_PRODUCERS: frozenset[Producer] = frozenset()


class ProducerRegistry:
    """Admission and removal of the producers of one topic (see the module docstring)."""

    def __init__(self, ledger: Ledger, writes: WriteBarrier) -> None:
        """``writes`` is the topic's barrier over the entries it accepted (staged or appended)."""
        self._ledger = ledger
        self._writes = writes
        stored = ledger.properties.get(TOPIC_EPOCH_PROPERTY)
        self.access: ProducerAccess[Producer] = ProducerAccess(stored)
        #: Admitted producers and queued waiters (the topic's "publishers"). The shared empty
        #: frozenset while there are none: an empty set costs 216 B, and most loaded topics
        #: have no producer most of the time (issue #26). Read it; `_track`/`_untrack` change it.
        self.producers: set[Producer] | frozenset[Producer] = _NO_PRODUCERS
        self._durable_epoch = stored
        # Made by the first epoch write (`_epoch_lock`): a Shared-only topic never needs one.
        self._persist_lock: asyncio.Lock | None = None
        self._promotions: set[asyncio.Task[None]] | None = None  # made by the first promotion
        self._closed = False  # set under _persist_lock: no epoch is written after close()

    @property
    def durable_epoch(self) -> int | None:
        """The topic epoch stored in the ledger properties (None if never stored)."""
        return self._durable_epoch

    def may_publish(self, producer: Producer) -> bool:
        return not producer.fenced and self.access.may_publish(producer)

    # ------------------------------------------------------------------ admission

    async def add(self, producer: Producer, requested_epoch: int | None) -> bool:
        """Admit ``producer``; returns False if it was queued (WaitForExclusive, not ready).

        Raises ProducerBusy / ProducerFenced as the access table says, ProducerFenced if it lost
        the topic before its grant was durable, PersistenceError if the grant could not be
        persisted.
        """
        decision = await self._decide(producer, requested_epoch)
        if isinstance(decision, Rejected):
            error = ProducerFenced if decision.code == "ProducerFenced" else ProducerBusy
            raise error(decision.message)
        if isinstance(decision, Queued):
            return False
        # Registered before any await, so that a removal racing with the grant (the client
        # closes, the connection drops) finds it and undoes it.
        self._track(producer)
        producer.topic_epoch = decision.topic_epoch
        self._carry_out_fencing(decision)
        if producer.mode is not ProducerAccessMode.Shared:
            assert decision.topic_epoch is not None
            try:
                await self._make_grant_durable(decision.topic_epoch)
            except BaseException as exc:
                await self._withdraw(producer)
                if isinstance(exc, (asyncio.CancelledError, BrokerError)):
                    raise
                raise PersistenceError(f"Failed to persist the topic epoch: {exc}") from exc
        if not self.access.is_registered(producer):
            # Fenced by a newer producer (or removed) while the grant was being persisted.
            self._untrack(producer)
            raise ProducerFenced("Producer was fenced")
        producer.ready = True
        return True

    async def _decide(
        self, producer: Producer, requested_epoch: int | None
    ) -> Admitted[Producer] | Queued | Rejected:
        """Ask the state machine, pinging an old same-name producer's connection if it asks."""
        confirmed: Producer | None = None
        while True:
            decision = self.access.request(
                producer,
                producer.name,
                producer.mode,
                producer.connection_key,
                requested_epoch,
                confirmed_alive=confirmed,
            )
            if not isinstance(decision, CheckLiveness):
                return decision
            old = decision.existing
            if await old.sink.check_alive():
                confirmed = old
            else:
                log.info("evicting producer %s: its connection is dead", old.name)
                await self.remove(old, notify=True)

    def _carry_out_fencing(self, decision: Admitted[Producer]) -> None:
        for fenced in decision.fence:
            self._fence(fenced)
        self._fail_waiters(decision.failed_waiters, "Producer was fenced")

    # ------------------------------------------------------------------ removal

    async def remove(self, producer: Producer, *, notify: bool = False) -> None:
        """The producer closed or its connection dropped; promote a waiter if that frees it."""
        self._untrack(producer)
        promotion = self.access.remove(producer)
        if notify:
            producer.sink.close_producer(producer)
        if promotion is not None:
            await self._promote(promotion)

    def producer_queued(self, producer: Producer) -> None:
        self._track(producer)

    def _track(self, producer: Producer) -> None:
        producers = self.producers
        if not isinstance(producers, set):
            producers = self.producers = set()
        producers.add(producer)

    def _untrack(self, producer: Producer) -> None:
        producers = self.producers
        if isinstance(producers, set):
            producers.discard(producer)
            if not producers:
                self.producers = _NO_PRODUCERS  # the last one left: drop the set's table

    async def increment_epoch(self) -> int:
        """Admin bump of the topic epoch (X4): the holder is fenced at once."""
        bump = self.access.increment_epoch()
        for fenced in bump.fence:
            self._fence(fenced)
        self._fail_waiters(bump.failed_waiters, "Topic epoch has already moved")
        await self._persist_epoch(bump.topic_epoch)
        if bump.promotion is not None:
            await self._promote(bump.promotion)
        return bump.topic_epoch

    async def _withdraw(self, producer: Producer) -> None:
        """Undo an admission whose grant failed; carry out the promotion that frees."""
        self._untrack(producer)
        promotion = self.access.remove(producer)
        if promotion is not None:
            await self._promote(promotion)

    def _fence(self, producer: Producer) -> None:
        producer.fenced = True
        self._untrack(producer)
        self.access.remove(producer)  # already out of the state machine: only forgets it
        producer.sink.close_producer(producer)

    def _fail_waiters(self, waiters: tuple[Producer, ...], message: str) -> None:
        for waiter in waiters:
            waiter.fenced = True
            self._untrack(waiter)
            self.access.remove(waiter)  # out of the state machine already: only forgets it
            waiter.sink.producer_failed(waiter, ProducerFenced(message))

    async def _promote(self, promotion: Promotion[Producer]) -> None:
        """Carry out a promotion in a task of its own, shielded from the caller.

        The caller usually runs on the *old* holder's connection (its CLOSE_PRODUCER, its
        connection loss), whose tasks are cancelled when that connection closes, typically right
        after the client closed the producer.  Cancelling the promotion half-way would leave the
        waiter registered as holder but never told, blocking the topic.
        """
        task = asyncio.ensure_future(self._carry_out_promotion(promotion))
        if self._promotions is None:
            self._promotions = set()
        self._promotions.add(task)
        task.add_done_callback(self._promotions.discard)
        await asyncio.shield(task)

    async def _carry_out_promotion(self, promotion: Promotion[Producer]) -> None:
        self._fail_waiters(promotion.failed_waiters, "Topic epoch has already moved")
        waiter = promotion.handle
        waiter.topic_epoch = promotion.topic_epoch
        try:
            await self._make_grant_durable(promotion.topic_epoch)
        except Exception as exc:
            log.error("promoting producer %s failed: %s", waiter.name, exc)
            waiter.sink.producer_failed(
                waiter, PersistenceError(f"Failed to persist the topic epoch: {exc}")
            )
            await self._withdraw(waiter)
            return
        if not self.access.is_registered(waiter):
            return  # it left (or was fenced) while the grant was being persisted
        waiter.ready = True
        waiter.sink.producer_ready(waiter, promotion.topic_epoch)

    # ------------------------------------------------------------------ durability

    async def _make_grant_durable(self, epoch: int) -> None:
        await self._previous_writes_durable()
        await self._persist_epoch(epoch)

    async def _previous_writes_durable(self) -> None:
        """Wait until every entry accepted so far is durable (or failed back to its client).

        Called when an exclusive producer is granted the topic: earlier writers can no longer
        get an entry accepted (the state machine stopped them at ``may_publish`` before this
        runs), so this waits for the group commits that hold their last entries, staged ones
        included.
        """
        try:
            await asyncio.wait_for(self._writes.wait_for_accepted(), PREVIOUS_WRITES_TIMEOUT_S)
        except TimeoutError:
            raise PersistenceError("Earlier writes to the topic are not durable yet") from None

    async def _persist_epoch(self, epoch: int) -> None:
        """Make ``epoch`` durable (atomic properties file + fsync) unless a higher one already is.

        Serialized: two grants persisting at once must not let the lower epoch land last.
        """
        async with self._epoch_lock():
            if self._closed:
                raise PersistenceError("Topic is closing")
            if self._durable_epoch is not None and self._durable_epoch >= epoch:
                return
            # To completion: a cancelled grant must not release the lock mid-write (close()).
            await run_to_completion(self._ledger.set_property, TOPIC_EPOCH_PROPERTY, epoch)
            self._durable_epoch = epoch

    async def close(self) -> None:
        """The topic is closing: let in-flight promotions finish, then refuse every later
        epoch write, so that nothing of this registry touches the ledger once it is closed."""
        if self._promotions:
            await asyncio.gather(*self._promotions, return_exceptions=True)
        async with self._epoch_lock():
            self._closed = True

    def _epoch_lock(self) -> asyncio.Lock:
        if self._persist_lock is None:
            self._persist_lock = asyncio.Lock()
        return self._persist_lock

    # ------------------------------------------------------------------ stats

    def stats(self) -> dict[str, object]:
        """The ``producerAccess`` section of the topic stats."""
        s = self.access.stats()
        holder = self.access.holder
        return {
            "topicEpoch": s.topic_epoch,
            "durableTopicEpoch": self._durable_epoch,
            "exclusiveHolder": s.holder,
            "exclusiveHolderMode": holder.mode.name if holder is not None else None,
            "waitingProducers": list(s.waiters),
            "sharedProducers": s.shared_producers,
            "fencedProducers": s.fenced,
        }
