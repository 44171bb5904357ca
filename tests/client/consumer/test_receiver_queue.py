"""``ReceiverQueue``: permits come back in FLOWs of half the queue, whoever takes the messages
(the loop, or a blocking receiver's thread), and a clear folds in what threads owe."""

from __future__ import annotations

import threading

from client.consumer.receiver_queue import ReceiverQueue
from client.message import Message
from client.message_id import MessageId
from protocol import pb


def message(entry: int) -> Message:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=entry, publish_time=1)
    return Message(b"x", MessageId(-1, 1, entry), "t", metadata)


class Flows:
    def __init__(self, connected: bool = True) -> None:
        self.sent: list[int] = []
        self.connected = connected

    def __call__(self, permits: int) -> bool:
        if self.connected:
            self.sent.append(permits)
        return self.connected


def test_a_flow_per_half_queue_handed_out() -> None:
    flows = Flows()
    queue = ReceiverQueue(10, flows, lambda: True, settle_every_take=False)
    for entry in range(12):
        queue.append(message(entry))
    for _ in range(12):
        taken = queue.messages.popleft()
        queue.handed_out(taken)
    assert flows.sent == [5, 5]
    assert queue.last_taken == MessageId(-1, 1, 11)


def test_permits_wait_for_a_connection() -> None:
    flows = Flows(connected=False)
    queue = ReceiverQueue(4, flows, lambda: True, settle_every_take=False)
    queue.return_permits(3)
    flows.connected = True
    queue.return_permits(0)
    assert flows.sent == [3]


def test_a_thread_owes_permits_until_settled_and_a_clear_folds_them_in() -> None:
    flows = Flows()
    queue = ReceiverQueue(16, flows, lambda: True, settle_every_take=False)
    for entry in range(4):
        queue.append(message(entry))
    taken = [queue.take_for_thread() for _ in range(3)]
    # Every second take asks to settle (16 // 2 // 4 == 2 permits a group).
    assert [t[1] for t in taken if t is not None] == [False, True, True]
    assert queue.owes_permits()
    assert queue.clear() == 1
    assert not queue.owes_permits()
    queue.return_permits(5)  # 3 owed + 5 = the threshold of 8
    assert flows.sent == [8]


def test_a_waiting_thread_wakes_when_a_message_is_queued() -> None:
    queue = ReceiverQueue(10, Flows(), lambda: True, settle_every_take=True)
    waiter = threading.Thread(target=queue.wait_for_thread, args=(10,))
    waiter.start()
    while queue.threads_waiting == 0:
        threading.Event().wait(0.001)
    queue.append(message(0))
    waiter.join(5)
    assert not waiter.is_alive()
    taken = queue.take_for_thread()
    assert taken is not None
    assert taken[1]  # with bookkeeping on every hand-out, every take is settled


def test_a_run_is_taken_under_one_lock_and_a_clear_makes_it_stale() -> None:
    # Queue 64: FLOW at 32, permit groups (and runs) of 8.
    flows = Flows()
    queue = ReceiverQueue(64, flows, lambda: True, settle_every_take=False, bulk_takes=True)
    assert queue.bulk_takes
    for entry in range(20):
        queue.append(message(entry))
    taken = queue.take_run_for_thread()
    assert taken is not None
    run, generation, settle = taken
    assert [m.message_id().entry_id() for m in run] == list(range(8))
    assert settle  # a whole permit group is owed
    assert queue.last_taken == MessageId(-1, 1, 7)
    assert queue.owes_permits()
    assert queue.clear() == 12
    assert queue.generation == generation + 1  # the run is stale: its taker drops it
    assert not queue.owes_permits()  # its permits were folded in, as if handed out


def test_a_run_given_back_goes_first_and_is_no_longer_owed() -> None:
    flows = Flows()
    queue = ReceiverQueue(64, flows, lambda: True, settle_every_take=False, bulk_takes=True)
    for entry in range(10):
        queue.append(message(entry))
    taken = queue.take_run_for_thread()
    assert taken is not None
    run, generation, _ = taken
    queue.give_back_for_thread(run[3:], generation)  # three handed out, five given back
    assert [m.message_id().entry_id() for m in queue.messages] == list(range(3, 10))
    queue.settle_owed()
    queue.return_permits(29)  # 3 handed out + 29 = the threshold of 32
    assert flows.sent == [32]
    # A stale run is not given back: the clear dropped what it came from.
    stale = queue.take_run_for_thread()
    assert stale is not None
    queue.clear()
    queue.give_back_for_thread(stale[0], stale[1])
    assert not queue.messages


def test_readers_and_tracked_hand_outs_take_one_message_at_a_time() -> None:
    tracked = ReceiverQueue(64, Flows(), lambda: True, settle_every_take=True, bulk_takes=True)
    assert not tracked.bulk_takes
    reader = ReceiverQueue(64, Flows(), lambda: True, settle_every_take=False)
    assert not reader.bulk_takes


def test_a_flow_is_owed_before_waiting_only_once_the_threshold_is_reached() -> None:
    flows = Flows()
    queue = ReceiverQueue(64, flows, lambda: True, settle_every_take=False, bulk_takes=True)
    for entry in range(40):
        queue.append(message(entry))
    assert not queue.flow_owed()
    for _ in range(3):
        assert queue.take_run_for_thread() is not None
    assert not queue.flow_owed()  # 24 owed: the broker still holds 40 permits
    assert queue.take_run_for_thread() is not None
    assert queue.flow_owed()  # 32 owed: a FLOW is due
    queue.settle_owed()
    assert flows.sent == [32]
    assert not queue.flow_owed()
