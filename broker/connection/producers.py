"""The producer side of one client connection: PRODUCER, SEND and CLOSE_PRODUCER.

``ProducerEndpoint`` holds the connection's producers and implements ``ProducerSink`` for the
topic (fencing, WaitForExclusive promotion, liveness pings). It writes frames only through its
``ServerConnection``.

Rules kept here:

1. SEND never waits: its identity is decided once (``protocol.send_identity``), the request goes
   to ``Publisher.submit`` (the topic's publish path) and the next frame is read at once.
2. Receipts (or SEND_ERRORs) go out strictly in SEND order per producer, each only when its own
   request is settled: a duplicate's immediate ``-1:-1`` waits behind an earlier pending write.
   The topic tells the producer once per group commit; the settled prefix is then written in one
   ``write``, each receipt built from bytes (``protocol.receipts``), not through protobuf.
3. Past ``maxPendingPublishRequestsPerConnection`` receipts outstanding, reading pauses; it
   resumes at half of that.
4. Nothing unparseable is stored: an entry whose checksum fails, or whose metadata does not
   parse, lacks a required field or contradicts the SEND (`SendEntryChecker`), gets a
   SEND_ERROR in its turn, and the producer and the connection stay usable.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.errors import (
    BrokerError,
    ChecksumError,
    InvalidMessageMetadata,
    ProducerFenced,
    ServiceNotReady,
    to_wire,
)
from broker.publish.producers import Producer
from broker.publish.publication import PublishOutcome, Settled
from broker.schemas.registry import SchemaRegistry
from protocol import commands, pb, send_identity
from protocol.enums import ProducerAccessMode
from protocol.errors import RemoteProtocolError
from protocol.framing import Frame
from protocol.ids import I64_MAX, from_u64, to_u64
from protocol.metadata import SendEntryChecker
from protocol.receipts import take_settled_receipts

if TYPE_CHECKING:
    from broker.connection.handle import ConnectionHandle
    from broker.publish.publisher import Publisher
    from broker.topics.topic import Topic

T = pb.BaseCommand.Type


@dataclass(eq=False)
class _ProducerState:
    producer: Producer
    topic: Topic
    #: SENDs in arrival order, until their receipt (or SEND_ERROR) is written: the SEND's
    #: sequence id and highest sequence id (what the receipt echoes) and the topic's answer.
    receipts: deque[tuple[int, int, PublishOutcome]] = field(default_factory=deque)
    #: The topic's publish path (``topic.publisher``, fixed for the topic's life), read once.
    publisher: Publisher = field(init=False)
    #: What the topic calls once per group commit (one object, so the topic can tell runs of
    #: this producer's requests apart cheaply); set by the endpoint.
    on_settled: Callable[[], None] = field(init=False)
    #: Resolved when ``receipts`` empties (CLOSE_PRODUCER waits for the earlier receipts).
    drained: asyncio.Future[None] | None = None
    #: The registry's version of the schema the producer declared; PRODUCER_SUCCESS carries
    #: it (as Java's) and clients stamp it on every message they send.
    schema_version: bytes | None = None

    def __post_init__(self) -> None:
        self.publisher = self.topic.publisher


class ProducerEndpoint:
    """The producers of one connection (ids are the client's, unique per connection)."""

    def __init__(self, conn: ConnectionHandle) -> None:
        self._conn = conn
        self._service = conn.service
        self._config = conn.service.config
        self._loop = conn.loop
        self._producers: dict[int, _ProducerState] = {}
        self._closing_producers: set[_ProducerState] = set()
        self._pending_publishes = 0
        # Read per SEND: the config is frozen, so the setting is read once.
        self._max_pending = self._config.max_pending_publish_requests_per_connection
        self._entry_checker = SendEntryChecker()
        self._creating: set[int] = set()  # producer ids whose PRODUCER is being handled

    def handlers(self) -> dict[int, Callable[[Frame], None]]:
        return {
            T.PRODUCER: self.on_producer,
            T.SEND: self.on_send,
            T.CLOSE_PRODUCER: self.on_close_producer,
        }

    def connection_lost(self) -> None:
        """Remove every producer, including those whose CLOSE_PRODUCER was in progress.

        Called after the connection cancelled its tasks, so these removals run (a dead
        exclusive holder must not keep its topic).
        """
        producers = list(self._producers.values()) + list(self._closing_producers)
        self._producers.clear()
        self._closing_producers.clear()
        for pstate in producers:
            self._conn.spawn(pstate.topic.remove_producer(pstate.producer))

    async def check_alive(self) -> bool:
        return await self._conn.check_alive()

    def on_producer(self, frame: Frame) -> None:
        cmd = frame.command.producer
        request_id = cmd.request_id
        self._conn.request(request_id, lambda: self._create_producer(cmd, request_id))

    async def _create_producer(self, cmd: pb.CommandProducer, request_id: int) -> None:
        producer_id = cmd.producer_id
        if producer_id in self._creating:
            # Java refuses it too: two creations under one id would both register a producer,
            # and closing the connection would remove only the one the id still names.
            raise ServiceNotReady("Producer is already present on the connection")
        self._creating.add(producer_id)
        try:
            await self._create_new_producer(cmd, request_id)
        finally:
            self._creating.discard(producer_id)

    async def _create_new_producer(self, cmd: pb.CommandProducer, request_id: int) -> None:
        topic_name = self._conn.parse_topic(cmd.topic)
        # Fencing too; an initial subscription is a durable subscription: consume as well.
        self._conn.authorizer.check_produce(
            self._conn.role,
            topic_name,
            original=self._conn.original_principal,
            initial_subscription=cmd.initial_subscription_name or None,
        )
        if cmd.HasField("topic_epoch") and cmd.topic_epoch > I64_MAX:
            # Java reads this uint64 as a long: negative, so older than any epoch. Adopting it
            # would let the epoch pass 2**64 - 1, which no PRODUCER_SUCCESS can carry.
            raise ProducerFenced("Topic epoch has already moved")
        existing = self._producers.get(cmd.producer_id)
        if existing is not None:
            # Java answers a duplicate PRODUCER for a live producer id with success again.
            self._send_producer_success(existing.producer, existing.topic, request_id)
            return
        topic = await self._service.get_topic(topic_name, create=True)
        schema_version = None
        schemas = SchemaRegistry(self._service.schemas, self._service.policies, self._config)
        if cmd.HasField("schema"):  # checked by the topic's compatibility strategy
            schema_version = await schemas.add_schema(topic_name, cmd.schema)
        else:
            schemas.check_producer_without_schema(topic_name)
        user_named = cmd.HasField("producer_name") and bool(cmd.producer_name)
        name = cmd.producer_name if user_named else self._service.generate_producer_name()
        producer = Producer(
            producer_id=cmd.producer_id,
            name=name,
            mode=ProducerAccessMode(cmd.producer_access_mode),
            sink=self,
            connection_key=self._conn,
            request_id=request_id,
            user_provided_name=user_named,
        )
        state = _ProducerState(producer, topic, schema_version=schema_version)
        state.on_settled = functools.partial(self._drain_receipts, state)
        self._producers[cmd.producer_id] = state
        requested_epoch = cmd.topic_epoch if cmd.HasField("topic_epoch") else None
        try:
            ready = await topic.add_producer(producer, requested_epoch)
        except BaseException:
            if self._producers.get(cmd.producer_id) is state:
                del self._producers[cmd.producer_id]
            raise
        if self._conn.closing:
            await topic.remove_producer(producer)
            return
        try:
            if cmd.HasField("initial_subscription_name") and cmd.initial_subscription_name:
                await topic.get_or_create_subscription(
                    cmd.initial_subscription_name, durable=True, start=None, initial_earliest=True
                )
            if topic.closed:
                # Unloaded while the grant was in progress: its CLOSE_PRODUCER may be out
                # already, and a success after it would leave a producer nobody serves.
                raise ServiceNotReady(f"Topic {topic.name.full_name} is being unloaded; retry")
        except Exception:  # cancellation: connection_lost removes what is still listed
            if self._producers.get(cmd.producer_id) is state:
                del self._producers[cmd.producer_id]
            await topic.remove_producer(producer)
            raise
        if ready:
            self._send_producer_success(producer, topic, request_id)
        else:
            self._conn.write(
                commands.producer_success(
                    request_id, name, last_sequence_id=-1, producer_ready=False
                )
            )

    def _send_producer_success(self, producer: Producer, topic: Topic, request_id: int) -> None:
        # Sequence ids arrive as uint64 and dedup keeps them so; the reply's field is an int64
        # (Java's long): send the same 64 bits, or an id >= 2**63 could never be answered.
        last_sequence_id = from_u64(to_u64(topic.last_sequence_id(producer.name)))
        state = self._producers.get(producer.producer_id)
        self._conn.write(
            commands.producer_success(
                request_id,
                producer.name,
                last_sequence_id=last_sequence_id,
                schema_version=state.schema_version if state is not None else None,
                topic_epoch=producer.topic_epoch,
                producer_ready=True,
            )
        )

    def close_producer(self, producer: Producer) -> None:
        state = self._producers.get(producer.producer_id)
        if state is not None and state.producer is producer:
            del self._producers[producer.producer_id]
        self._conn.write(commands.close_producer(producer.producer_id))

    def producer_ready(self, producer: Producer, topic_epoch: int | None) -> None:
        state = self._producers.get(producer.producer_id)
        if state is None or state.producer is not producer:
            return
        self._send_producer_success(producer, state.topic, producer.request_id)

    def producer_failed(self, producer: Producer, error: BrokerError) -> None:
        state = self._producers.get(producer.producer_id)
        if state is not None and state.producer is producer:
            del self._producers[producer.producer_id]
        self._conn.reply_error(producer.request_id, error)

    def on_send(self, frame: Frame) -> None:
        send = frame.command.send
        state = self._producers.get(send.producer_id)
        if state is None or not state.producer.ready:
            # Java drops SENDs of producers it just closed; the client resends after reconnect.
            return
        sequence_id, highest, num_messages = send_identity.of_send(send)
        entry = frame.entry
        assert entry is not None
        producer = state.producer
        outcome: PublishOutcome
        try:
            # Rule 4, inline (this runs once per message): a bad checksum or metadata is
            # refused in its turn; the checker gives the chunk facts of a valid entry.
            if not frame.checksum_valid:
                raise ChecksumError("Checksum failed on the broker")
            try:
                chunk = self._entry_checker.check(entry, num_messages)
            except RemoteProtocolError as exc:
                raise InvalidMessageMetadata(f"Invalid message metadata: {exc}") from None
            outcome = state.publisher.submit(
                producer,
                sequence_id,
                highest,
                entry,
                chunk,
                num_messages,
                state.on_settled,
                None,
                frame.entry_crc,
            )
        except ProducerFenced:
            # PIP-68: nothing from a fenced producer reaches the ledger; the client learns it
            # on reconnect (its stale topic epoch is refused with ProducerFenced).
            self.close_producer(producer)
            return
        except BrokerError as exc:
            outcome = Settled(error=exc)
        producer.msg_in += num_messages
        state.receipts.append((sequence_id, highest, outcome))
        self._pending_publishes += 1
        if self._pending_publishes >= self._max_pending:
            self._conn.pause_reading()
        if outcome.done:  # a duplicate or a refusal: answered in its turn (rule 2)
            self._drain_receipts(state)

    def _drain_receipts(self, state: _ProducerState) -> None:
        """Write the receipts of the settled prefix of ``state.receipts``, in one write.

        The receipts of a run of durable (or duplicate) SENDs come from one compiled call
        (``take_settled_receipts``); a refused SEND in between is answered with its SEND_ERROR
        in its turn."""
        receipts = state.receipts
        if not receipts or not receipts[0][2].done:
            return
        producer_id = state.producer.producer_id
        frames: list[bytes] = []
        count = 0
        while True:
            data, taken = take_settled_receipts(producer_id, receipts)
            if taken:
                frames.append(data)
                count += taken
            if not receipts or not receipts[0][2].done:
                break
            sequence_id, _highest, outcome = receipts.popleft()  # settled with an error
            error = outcome.error
            assert error is not None
            code, message = to_wire(error)
            # Any SEND_ERROR but ChecksumError makes the C++ client reconnect and resend.
            frames.append(commands.send_error(producer_id, sequence_id, code, message))
            count += 1
        self._conn.write(frames[0] if len(frames) == 1 else b"".join(frames))
        self._pending_publishes -= count
        if not receipts and state.drained is not None and not state.drained.done():
            state.drained.set_result(None)
        if self._conn.reading_paused and self._pending_publishes <= self._max_pending // 2:
            self._conn.resume_reading()

    def on_close_producer(self, frame: Frame) -> None:
        cmd = frame.command.close_producer
        state = self._producers.get(cmd.producer_id)
        request_id = cmd.request_id

        async def close() -> None:
            if state is not None:
                if self._producers.get(cmd.producer_id) is state:
                    del self._producers[cmd.producer_id]
                self._closing_producers.add(state)
                # SUCCESS only after every earlier receipt (they are in the output queue first).
                if state.receipts:
                    if state.drained is None or state.drained.done():
                        state.drained = self._loop.create_future()
                    await state.drained
                await state.topic.remove_producer(state.producer)
                self._closing_producers.discard(state)
            self._conn.write(commands.success(request_id))

        self._conn.request(request_id, close)
