"""Producers of a topic: admission under PIP-68 access modes, and fencing.

``ProducerAccess`` (pure) decides; this module carries the decisions out: it persists the topic
epoch in the ledger properties **before** PRODUCER_SUCCESS carries it, closes fenced producers,
fails fenced waiters, promotes WaitForExclusive waiters with a second PRODUCER_SUCCESS, and pings an
old connection before evicting a same-name producer (Java ``checkConnectionLiveness``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

from broker.errors import BrokerError, ProducerBusy, ProducerFenced
from broker.producer_access import (
    AccessMode,
    Admitted,
    CheckLiveness,
    ProducerAccess,
    Promotion,
    Queued,
    Rejected,
)
from broker.storage import Ledger

log = logging.getLogger(__name__)

TOPIC_EPOCH_PROPERTY = "pulsar.topic_epoch"


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
    mode: AccessMode
    sink: ProducerSink
    connection_key: object
    request_id: int
    user_provided_name: bool = True
    topic_epoch: int | None = None
    ready: bool = False
    fenced: bool = False
    msg_in: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class ProducerRegistry:
    """Admission and removal of the producers of one topic."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        stored = ledger.properties.get(TOPIC_EPOCH_PROPERTY)
        self.access: ProducerAccess[Producer] = ProducerAccess(stored)
        self.producers: set[Producer] = set()

    def may_publish(self, producer: Producer) -> bool:
        return not producer.fenced and self.access.may_publish(producer)

    async def add(self, producer: Producer, requested_epoch: int | None) -> bool:
        """Admit ``producer``; returns False if it was queued (WaitForExclusive, not ready).

        Raises ProducerBusy / ProducerFenced as the access table says.
        """
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
            if isinstance(decision, CheckLiveness):
                old = decision.existing
                if await old.sink.check_alive():
                    confirmed = old
                else:
                    log.info("evicting producer %s: its connection is dead", old.name)
                    await self.remove(old, notify=True)
                continue
            break
        if isinstance(decision, Rejected):
            error = ProducerFenced if decision.code == "ProducerFenced" else ProducerBusy
            raise error(decision.message)
        if isinstance(decision, Queued):
            return False
        assert isinstance(decision, Admitted)
        if decision.epoch_changed and decision.topic_epoch is not None:
            await self._persist_epoch(decision.topic_epoch)
        producer.topic_epoch = decision.topic_epoch
        producer.ready = True
        self.producers.add(producer)
        for fenced in decision.fence:
            self._fence(fenced)
        for waiter in decision.failed_waiters:
            waiter.sink.producer_failed(waiter, ProducerFenced("Producer was fenced"))
        return True

    async def remove(self, producer: Producer, *, notify: bool = False) -> None:
        """The producer closed or its connection dropped; promote a waiter if that frees it."""
        self.producers.discard(producer)
        promotion = self.access.remove(producer)
        if notify:
            producer.sink.close_producer(producer)
        if promotion is not None:
            await self._promote(promotion)

    def producer_queued(self, producer: Producer) -> None:
        self.producers.add(producer)

    async def increment_epoch(self) -> int:
        bump = self.access.increment_epoch()
        await self._persist_epoch(bump.topic_epoch)
        for fenced in bump.fence:
            self._fence(fenced)
        for waiter in bump.failed_waiters:
            waiter.sink.producer_failed(waiter, ProducerFenced("Topic epoch has already moved"))
        if bump.promotion is not None:
            await self._promote(bump.promotion)
        return bump.topic_epoch

    def _fence(self, producer: Producer) -> None:
        producer.fenced = True
        self.producers.discard(producer)
        self.access.remove(producer)
        producer.sink.close_producer(producer)

    async def _promote(self, promotion: Promotion[Producer]) -> None:
        if promotion.epoch_changed:
            await self._persist_epoch(promotion.topic_epoch)
        waiter = promotion.handle
        waiter.topic_epoch = promotion.topic_epoch
        waiter.ready = True
        waiter.sink.producer_ready(waiter, promotion.topic_epoch)
        for failed in promotion.failed_waiters:
            failed.sink.producer_failed(failed, ProducerFenced("Topic epoch has already moved"))

    async def _persist_epoch(self, epoch: int) -> None:
        # Durable before any PRODUCER_SUCCESS carries it (atomic properties file + fsync).
        await asyncio.to_thread(self._ledger.set_property, TOPIC_EPOCH_PROPERTY, epoch)

    def stats(self) -> dict[str, object]:
        s = self.access.stats()
        return {
            "topicEpoch": s.topic_epoch,
            "exclusiveHolder": s.holder,
            "waitingProducers": list(s.waiters),
            "sharedProducers": s.shared_producers,
            "fencedProducers": s.fenced,
        }
