"""A consumer's entries in flight go back for redelivery a bounded number per turn of the loop
(issue #24): when its connection is lost, when it closes, when it asks for all of them again;
and a lost connection detaches its consumers a few per turn. Nothing changes for the clients:
every entry is redelivered once, with its redelivery count.

Real broker, raw sockets; ``TurnSampler`` reads a count once per turn of the broker's loop.
"""

from __future__ import annotations

from broker.connection.consumers import CONSUMERS_PER_TURN, ENTRIES_PER_TURN
from broker.dispatch.subscription import Subscription
from broker.service import BrokerService
from protocol import commands, pb
from protocol.metadata import encode_entry
from tests.heavy_sends import TurnSampler
from tests.helpers import BrokerThread, wait_until
from tests.raw_client import RawConnection

T = pb.BaseCommand.Type
TOPIC = "persistent://public/default/give-back"
COUNT = 3 * ENTRIES_PER_TURN + 10
SHARED = pb.CommandSubscribe.Shared


def service_of(broker: BrokerThread) -> BrokerService:
    assert broker.broker is not None
    assert broker.broker.service is not None
    return broker.broker.service


def publish(conn: RawConnection, count: int) -> None:
    conn.create_producer(TOPIC, 1, "p")
    metadata = [
        pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
        for seq in range(count)
    ]
    conn.send(b"".join(commands.send(1, m.sequence_id, encode_entry(m, b"m")) for m in metadata))
    conn.wait_for(T.SEND_RECEIPT, count)


def holding_everything(broker: BrokerThread, conn: RawConnection) -> Subscription:
    """``COUNT`` entries published, all dispatched to consumer 2 of ``conn`` on "sub"."""
    publish(conn, COUNT)
    conn.send(commands.subscribe(TOPIC, "sub", 2, 2, SHARED, initial_position=1))
    conn.wait_for(T.SUCCESS)
    conn.send(commands.flow(2, COUNT))
    conn.wait_for(T.MESSAGE, COUNT)
    subscription: Subscription = service_of(broker).topics[TOPIC].subscriptions["sub"]
    assert subscription.unacked_count() == COUNT
    return subscription


def in_flight_to(subscription: Subscription, consumer_name: str) -> int:
    return sum(len(c.pending) for c in subscription.consumers if c.name == consumer_name)


def redelivered_to_another(broker: BrokerThread) -> list[int]:
    """A second consumer on "sub" takes everything; the redelivery count of each message."""
    with RawConnection(broker.port) as other:
        other.handshake()
        other.send(commands.subscribe(TOPIC, "sub", 7, 7, SHARED, consumer_name="other"))
        other.wait_for(T.SUCCESS)
        other.send(commands.flow(7, COUNT))
        messages = other.wait_for(T.MESSAGE, COUNT)
    return [m.command.message.redelivery_count for m in messages]


def test_a_lost_connection_gives_back_its_entries_a_part_per_turn(broker: BrokerThread) -> None:
    assert broker.loop is not None
    conn = RawConnection(broker.port)
    conn.handshake()
    subscription = holding_everything(broker, conn)
    name = subscription.consumers[0].name
    sampler = TurnSampler(broker.loop, lambda: in_flight_to(subscription, name))
    conn.close()
    wait_until(lambda: not subscription.consumers, failure=lambda: "the consumer stayed")
    assert sampler.stop() <= ENTRIES_PER_TURN
    assert sampler.turns > COUNT // ENTRIES_PER_TURN
    assert redelivered_to_another(broker) == [1] * COUNT


def test_a_lost_connection_detaches_its_consumers_a_few_per_turn(broker: BrokerThread) -> None:
    assert broker.loop is not None
    consumers = 3 * CONSUMERS_PER_TURN + 5
    service = service_of(broker)
    conn = RawConnection(broker.port)
    conn.handshake()
    conn.send(
        b"".join(commands.subscribe(TOPIC, f"s{i}", i, i, SHARED) for i in range(1, consumers + 1))
    )
    conn.wait_for(T.SUCCESS, consumers)

    def attached() -> int:
        return sum(len(s.consumers) for s in service.topics[TOPIC].subscriptions.values())

    assert attached() == consumers
    sampler = TurnSampler(broker.loop, attached)
    conn.close()
    wait_until(lambda: attached() == 0, failure=lambda: f"{attached()} consumers stayed")
    assert sampler.stop() <= CONSUMERS_PER_TURN


def test_a_close_consumer_gives_back_a_part_per_turn_then_answers(broker: BrokerThread) -> None:
    assert broker.loop is not None
    with RawConnection(broker.port) as conn:
        conn.handshake()
        subscription = holding_everything(broker, conn)
        name = subscription.consumers[0].name
        sampler = TurnSampler(broker.loop, lambda: in_flight_to(subscription, name))
        # The PING behind the close is answered after it: the close is finished by then.
        conn.send(commands.close_consumer(2, 9) + commands.ping())
        conn.wait_for(T.PONG)
        assert sampler.stop() <= ENTRIES_PER_TURN
        replies = [f for f in conn.frames if f.type in (T.SUCCESS, T.PONG)]
        assert [f.type for f in replies[-2:]] == [T.SUCCESS, T.PONG]
        assert replies[-2].command.success.request_id == 9
        assert not subscription.consumers
        assert len(conn.of_type(T.MESSAGE)) == COUNT  # nothing sent again to the closing one
    assert redelivered_to_another(broker) == [1] * COUNT


def test_redeliver_all_gives_back_a_part_per_turn(broker: BrokerThread) -> None:
    assert broker.loop is not None
    with RawConnection(broker.port) as conn:
        conn.handshake()
        subscription = holding_everything(broker, conn)
        name = subscription.consumers[0].name
        sampler = TurnSampler(broker.loop, lambda: in_flight_to(subscription, name))
        # The FLOW is decoded once every entry is given back: all come again, in order.
        conn.send(commands.redeliver_unacknowledged_messages(2) + commands.flow(2, COUNT))
        again = conn.wait_for(T.MESSAGE, 2 * COUNT)[COUNT:]
        assert sampler.stop() <= ENTRIES_PER_TURN
    assert [m.command.message.redelivery_count for m in again] == [1] * COUNT
    assert [m.command.message.message_id.entryId for m in again] == list(range(COUNT))
