"""The consumer side of one client connection: SUBSCRIBE, FLOW, ACK, SEEK and friends.

``ConsumerEndpoint`` holds the connection's consumers and implements ``ConsumerSink`` for the
subscriptions (MESSAGE frames, broker-initiated CLOSE_CONSUMER, ACTIVE_CONSUMER_CHANGE). Frames go
out only through its ``ServerConnection``, whose write buffer gives the back-pressure signal.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from broker.dispatch.consumer import Consumer, RunItem
from broker.dispatch.key_shared import KeySharedPolicy
from broker.dispatch.subscription import Subscription
from broker.errors import (
    BrokerError,
    ConsumerBusy,
    ConsumerNotFound,
    MetadataError,
    NotAllowed,
    ServiceNotReady,
    to_wire,
)
from broker.schemas.registry import SchemaRegistry
from broker.storage import Position
from broker.topics.positions import find_position_by_publish_time, reader_start, seek_target
from protocol import commands, pb
from protocol.commands.consumers import acked_positions
from protocol.dispatch_frames import encode_messages
from protocol.enums import AckType, InitialPosition, KeySharedMode, SubType
from protocol.errors import ServerError
from protocol.framing import Frame
from protocol.ids import MessageId, from_u64

if TYPE_CHECKING:
    from broker.connection.handle import ConnectionHandle
    from broker.topics.topic import Topic

T = pb.BaseCommand.Type
#: Message ids of one ACK or REDELIVER handled per turn of the loop (~3 ms, issue #24): a
#: client's ack group is ~1000 ids, but one frame may carry 600,000 (~2 s of work).
IDS_PER_TURN = 1000

Item = TypeVar("Item")
#: Entries in flight given back for redelivery per turn when a consumer closes, its connection
#: is lost or it asks for all of them again (~0.7 ms a thousand), and consumers detached per
#: turn when a connection holding many is lost (issue #24).
ENTRIES_PER_TURN = 1000
CONSUMERS_PER_TURN = 64


@dataclass(eq=False)
class _ConsumerState:
    consumer: Consumer
    subscription: Subscription
    topic: Topic


def understands_reached_end_of_topic(client_version: str) -> bool:
    """Whether REACHED_END_OF_TOPIC may be sent to this client.

    Java sends it to every client speaking protocol v9 or later, but the C++ client (and the
    Python, Node.js and Go-over-C++ wrappers, which all announce ``Pulsar-CPP-v...``) has no case
    for it in ``ClientConnection::handleIncomingCommand`` (checked up to 4.2.0): it logs
    "Received invalid message from server" and closes the connection, then reconnects and gets
    it again, forever. Those clients learn nothing from it, so they do not get it.
    """
    return not client_version.startswith("Pulsar-CPP")


def _key_shared_policy(cmd: pb.CommandSubscribe) -> KeySharedPolicy:
    """A Key_Shared SUBSCRIBE's ``keySharedMeta``; without one, Java's default (AUTO_SPLIT, in
    order). Hash ranges count in STICKY mode only, as in Java."""
    if not cmd.HasField("keySharedMeta"):
        return KeySharedPolicy()
    meta = cmd.keySharedMeta
    try:
        mode = KeySharedMode(meta.keySharedMode)
    except ValueError:
        raise MetadataError(f"Unknown key_shared mode {meta.keySharedMode}") from None
    ranges = tuple((r.start, r.end) for r in meta.hashRanges)
    return KeySharedPolicy(
        mode=mode,
        hash_ranges=ranges if mode == KeySharedMode.STICKY else (),
        allow_out_of_order_delivery=meta.allowOutOfOrderDelivery,
    )


def _give_back_then_detach(state: _ConsumerState) -> Iterator[int]:
    """Give ``state``'s consumer's entries in flight back for redelivery, ``ENTRIES_PER_TURN`` per
    step (yielding how many), then detach it (the last step: the rest, at most as many)."""
    positions = list(state.consumer.pending)
    given = 0
    while len(positions) - given > ENTRIES_PER_TURN:
        state.subscription.redeliver(state.consumer, positions[given : given + ENTRIES_PER_TURN])
        given += ENTRIES_PER_TURN
        yield ENTRIES_PER_TURN
    state.subscription.remove_consumer(state.consumer)
    yield len(positions) - given


def _position(message_id: pb.MessageIdData) -> Position:
    return Position(from_u64(message_id.ledgerId), from_u64(message_id.entryId))


class ConsumerEndpoint:
    """The consumers of one connection (ids are the client's, unique per connection)."""

    def __init__(self, conn: ConnectionHandle) -> None:
        self._conn = conn
        self._service = conn.service
        self._consumers: dict[int, _ConsumerState] = {}
        self._subscribing: set[int] = set()  # consumer ids whose SUBSCRIBE is being handled

    def handlers(self) -> dict[int, Callable[[Frame], None]]:
        return {
            T.SUBSCRIBE: self.on_subscribe,
            T.FLOW: self.on_flow,
            T.ACK: self.on_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.on_redeliver_unacknowledged_messages,
            T.SEEK: self.on_seek,
            T.GET_LAST_MESSAGE_ID: self.on_get_last_message_id,
            T.UNSUBSCRIBE: self.on_unsubscribe,
            T.CLOSE_CONSUMER: self.on_close_consumer,
            T.CONSUMER_STATS: self.on_consumer_stats,
        }

    def connection_lost(self) -> None:
        """Detach every consumer: their unacknowledged entries go back for redelivery, a bounded
        amount per turn of the loop (one connection may hold a thousand consumers, or one
        consumer with 100,000 entries in flight: ~15-30 ms at once)."""
        states = deque(self._consumers.values())
        self._consumers.clear()
        if states:
            self._detach_in_turns(states, None)

    def _detach_in_turns(
        self, states: deque[_ConsumerState], current: Iterator[int] | None
    ) -> None:
        """This turn's share of ``connection_lost``: up to ``ENTRIES_PER_TURN`` entries given back
        or ``CONSUMERS_PER_TURN`` consumers detached, then the rest in the next turn. A consumer
        stays attached (it cannot receive: its connection is closed) until the last of its
        entries is given back, so a Key_Shared key or an Exclusive subscription is not handed to
        another consumer while older entries of it are still out."""
        given = detached = 0
        while given < ENTRIES_PER_TURN and detached < CONSUMERS_PER_TURN:
            if current is None:
                if not states:
                    return
                current = _give_back_then_detach(states.popleft())
            part = next(current, None)
            if part is None:
                current, detached = None, detached + 1
            else:
                given += part
        asyncio.get_running_loop().call_soon(self._detach_in_turns, states, current)

    def reschedule_dispatch(self) -> None:
        """The socket can take more: let every subscription of ours dispatch again."""
        for state in self._consumers.values():
            state.subscription.schedule_dispatch()

    def is_writable(self) -> bool:
        return self._conn.is_writable()

    def on_subscribe(self, frame: Frame) -> None:
        cmd = frame.command.subscribe
        request_id = cmd.request_id
        self._conn.request(request_id, lambda: self._subscribe(cmd, request_id))

    async def _subscribe(self, cmd: pb.CommandSubscribe, request_id: int) -> None:
        consumer_id = cmd.consumer_id
        if consumer_id in self._subscribing:
            # As Java: a second SUBSCRIBE for an id still being subscribed would attach a second
            # consumer that closing the connection never detaches (the id names only one).
            raise ServiceNotReady("Consumer is already present on the connection")
        self._subscribing.add(consumer_id)
        try:
            await self._subscribe_new(cmd, request_id)
        finally:
            self._subscribing.discard(consumer_id)

    async def _subscribe_new(self, cmd: pb.CommandSubscribe, request_id: int) -> None:
        if not cmd.subscription:
            raise MetadataError("Empty subscription name")
        existing = self._consumers.get(cmd.consumer_id)
        if existing is not None:
            self._conn.write(commands.success(request_id))
            return
        topic_name = self._conn.parse_topic(cmd.topic)
        self._conn.authorizer.check_consume(
            self._conn.role, topic_name, original=self._conn.original_principal
        )
        topic = await self._service.get_topic(topic_name, create=True)
        if cmd.HasField("schema"):  # before the subscription exists, as Pulsar
            service = self._service
            schemas = SchemaRegistry(service.schemas, service.policies, service.config)
            await schemas.add_or_check_for_consumer(topic, cmd.schema)
        durable = cmd.durable
        start: MessageId | None = None
        if not durable and cmd.HasField("start_message_id"):
            start = MessageId.from_pb(cmd.start_message_id)
        sub_type = SubType(cmd.subType)
        if cmd.read_compacted and sub_type in (SubType.Shared, SubType.Key_Shared):
            # As Java: the compacted view is read by a single active consumer.
            raise NotAllowed("Optional read compacted is not supported for Shared subscriptions")
        subscription = await topic.get_or_create_subscription(
            cmd.subscription,
            durable=durable,
            start=None if start is None else reader_start(topic.ledger, start),
            initial_earliest=int(cmd.initialPosition) == InitialPosition.Earliest,
        )
        if not subscription.consumers:
            await topic.set_read_compacted(subscription, cmd.read_compacted)
        consumer = Consumer(
            consumer_id=cmd.consumer_id,
            name=cmd.consumer_name,
            sink=self,
            priority_level=cmd.priority_level,
            key_shared=_key_shared_policy(cmd) if sub_type == SubType.Key_Shared else None,
        )
        if self._conn.closing:
            return
        subscription.add_consumer(consumer, sub_type)
        self._consumers[cmd.consumer_id] = _ConsumerState(consumer, subscription, topic)
        self._conn.write(commands.success(request_id))

    def _consumer_state(self, consumer_id: int) -> _ConsumerState:
        state = self._consumers.get(consumer_id)
        if state is None:
            raise MetadataError("Consumer not found")
        return state

    def on_flow(self, frame: Frame) -> None:
        cmd = frame.command.flow
        state = self._consumers.get(cmd.consumer_id)
        if state is not None:
            state.subscription.add_permits(state.consumer, cmd.messagePermits)

    def on_ack(self, frame: Frame) -> None:
        cmd = frame.command.ack
        state = self._consumers.get(cmd.consumer_id)
        has_request = cmd.HasField("request_id")
        if state is None:
            if has_request:
                self._conn.write(
                    commands.ack_response(
                        cmd.consumer_id,
                        cmd.request_id,
                        error=ServerError.ConsumerNotFound,
                        message="Consumer not found",
                    )
                )
            return

        def answer(error: BrokerError | None) -> None:
            if not has_request:
                return
            if error is None:
                self._conn.write(commands.ack_response(cmd.consumer_id, cmd.request_id))
                return
            code, message = to_wire(error)
            self._conn.write(
                commands.ack_response(cmd.consumer_id, cmd.request_id, error=code, message=message)
            )

        if int(cmd.ack_type) == AckType.Cumulative:
            try:
                if cmd.message_id:
                    last = cmd.message_id[-1]
                    state.subscription.acknowledge_cumulative(
                        state.consumer, _position(last), list(last.ack_set) or None
                    )
            except BrokerError as exc:
                answer(exc)
                return
            answer(None)
            return

        def acknowledge(part: list[tuple[Position, list[int] | None]]) -> None:
            state.subscription.acknowledge(state.consumer, part)

        if len(cmd.message_id) <= IDS_PER_TURN:
            # A client's ack group: one turn, its ids read at once (compiled: from the bytes).
            self._in_turns(
                cmd.consumer_id, state, acked_positions(cmd, Position), acknowledge, answer
            )
            return

        def acknowledge_ids(part: list[pb.MessageIdData]) -> None:
            # A huge ACK: its ids are read part by part too, so no turn holds the loop long.
            acknowledge([(_position(m), list(m.ack_set) or None) for m in part])

        self._in_turns(cmd.consumer_id, state, cmd.message_id, acknowledge_ids, answer)

    def on_redeliver_unacknowledged_messages(self, frame: Frame) -> None:
        cmd = frame.command.redeliverUnacknowledgedMessages
        state = self._consumers.get(cmd.consumer_id)
        if state is None:
            return
        if not cmd.message_ids:
            # All of them, a part per turn: the entries in flight now, not those dispatched again
            # between two parts.
            positions = list(state.consumer.pending)
            parts = (
                positions[i : i + ENTRIES_PER_TURN]
                for i in range(0, len(positions), ENTRIES_PER_TURN)
            )

            def redeliver_part() -> bool:
                part = next(parts, None)
                if part is None or self._consumers.get(cmd.consumer_id) is not state:
                    return True
                state.subscription.redeliver(state.consumer, part)
                return False

            if not redeliver_part():
                self._conn.finish_in_turns(redeliver_part)
            return

        def redeliver(part: list[pb.MessageIdData]) -> None:
            state.subscription.redeliver(state.consumer, [_position(m) for m in part])

        self._in_turns(cmd.consumer_id, state, cmd.message_ids, redeliver, lambda _error: None)

    def _in_turns(
        self,
        consumer_id: int,
        state: _ConsumerState,
        ids: Sequence[Item],
        apply: Callable[[list[Item]], None],
        done: Callable[[BrokerError | None], None],
    ) -> None:
        """``apply`` the ids ``IDS_PER_TURN`` at a time, one part per turn of the loop (the
        connection decodes nothing else meanwhile), then ``done``: with the first error, or
        ``ConsumerNotFound`` if the consumer went away between two parts."""
        start = 0

        def step() -> bool:
            nonlocal start
            if self._consumers.get(consumer_id) is not state:
                done(ConsumerNotFound("Consumer not found"))
                return True
            try:
                apply(list(ids[start : start + IDS_PER_TURN]))
            except BrokerError as exc:
                done(exc)
                return True
            start += IDS_PER_TURN
            if start < len(ids):
                return False
            done(None)
            return True

        if not step():
            self._conn.finish_in_turns(step)

    def on_seek(self, frame: Frame) -> None:
        cmd = frame.command.seek
        request_id = cmd.request_id

        async def seek() -> None:
            state = self._consumer_state(cmd.consumer_id)
            self._conn.authorizer.check_consume(
                self._conn.role, state.topic.name, original=self._conn.original_principal
            )
            topic, subscription = state.topic, state.subscription
            if cmd.HasField("message_publish_time"):
                target = await find_position_by_publish_time(topic.ledger, cmd.message_publish_time)
            elif cmd.HasField("message_id"):
                target = seek_target(topic.ledger, MessageId.from_pb(cmd.message_id))
            else:
                raise MetadataError("Seek needs a message id or a publish time")
            if self._consumers.get(cmd.consumer_id) is not state or subscription.closed:
                # Closed, unsubscribed or unloaded while the seek by time read the disk.
                raise MetadataError("Consumer not found")
            # Java's order, which the client expects: disconnect, reset, then reply.
            subscription.disconnect_all()
            subscription.reset_to(target)
            self._conn.write(commands.success(request_id))

        self._conn.request(request_id, seek)

    def on_get_last_message_id(self, frame: Frame) -> None:
        cmd = frame.command.getLastMessageId
        request_id = cmd.request_id

        async def get_last_message_id() -> None:
            # Async: the last entry's batch index may have to be read from disk.
            state = self._consumer_state(cmd.consumer_id)
            last, mark_delete = await state.topic.last_message_id(state.subscription)
            self._conn.write(commands.get_last_message_id_response(request_id, last, mark_delete))

        self._conn.request(request_id, get_last_message_id)

    def on_unsubscribe(self, frame: Frame) -> None:
        cmd = frame.command.unsubscribe
        request_id = cmd.request_id

        async def unsubscribe() -> None:
            state = self._consumer_state(cmd.consumer_id)
            self._conn.authorizer.check_consume(
                self._conn.role, state.topic.name, original=self._conn.original_principal
            )
            others = [c for c in state.subscription.consumers if c is not state.consumer]
            if others:
                raise ConsumerBusy("Unconnected or shared consumer attempting to unsubscribe")
            del self._consumers[cmd.consumer_id]
            state.subscription.remove_consumer(state.consumer, redeliver=False)
            await state.topic.delete_subscription(state.subscription.name)
            self._conn.write(commands.success(request_id))

        self._conn.request(request_id, unsubscribe)

    def on_close_consumer(self, frame: Frame) -> None:
        cmd = frame.command.close_consumer
        state = self._consumers.pop(cmd.consumer_id, None)
        if state is None:
            self._conn.write(commands.success(cmd.request_id))
            return
        # Answered once the consumer is detached; its entries go back a part per turn, and the
        # connection decodes nothing else meanwhile (frames behind see the consumer gone). No
        # permits: nothing given back goes out to it again in between.
        state.consumer.permits = 0
        steps = _give_back_then_detach(state)

        def step() -> bool:
            if next(steps, None) is not None:
                return False
            self._conn.write(commands.success(cmd.request_id))
            return True

        if not step():
            self._conn.finish_in_turns(step)

    def on_consumer_stats(self, frame: Frame) -> None:
        cmd = frame.command.consumerStats
        state = self._consumers.get(cmd.consumer_id)
        if state is None:
            self._conn.write(
                commands.consumer_stats_response(
                    cmd.request_id,
                    error_code=ServerError.ConsumerNotFound,
                    error_message="Consumer not found",
                )
            )
            return
        consumer = state.consumer
        self._conn.write(
            commands.consumer_stats_response(
                cmd.request_id,
                stats={
                    "consumerName": consumer.name,
                    "availablePermits": consumer.permits,
                    "unackedMessages": consumer.unacked_messages,
                    "msgBacklog": state.subscription.backlog(),
                    "type": state.subscription.sub_type.name
                    if state.subscription.sub_type is not None
                    else "",
                },
            )
        )

    def send_messages(self, consumer_id: int, run: list[RunItem]) -> None:
        # The partition index goes in the id, as Pulsar's broker does: the official clients
        # report it from there (message_id().partition()).
        state = self._consumers.get(consumer_id)
        partition = state.topic.name.partition if state is not None else -1
        self._conn.write(encode_messages(consumer_id, partition, run))

    def close_consumer(self, consumer_id: int) -> None:
        # Forget the id first: the client re-subscribes with the same id after CLOSE_CONSUMER.
        self._consumers.pop(consumer_id, None)
        self._conn.write(commands.close_consumer(consumer_id))

    def reached_end_of_topic(self, consumer_id: int) -> None:
        if understands_reached_end_of_topic(self._conn.client_version):
            self._conn.write(commands.reached_end_of_topic(consumer_id))

    def active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self._conn.write(commands.active_consumer_change(consumer_id, is_active))
