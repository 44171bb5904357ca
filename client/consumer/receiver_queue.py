"""A consumer's receiver queue: messages received and not yet handed out, and their permits.

Permits count messages. One comes back per message handed to the application, per batch index
skipped (already acknowledged, or before a reader's start), per non-final chunk and per
discarded corrupt entry; FLOW is sent when half the queue's worth has accumulated.

A blocking ``Consumer`` on another thread takes queued messages without a round trip through
the event loop (``take_for_thread``) and, with nothing queued, waits on a thread event that is
set when messages arrive (``wait_for_thread``); the permits it owes go back on the loop, a few
at a time (``settle_owed``). A lock makes "pop and owe its permit" atomic against a clear of
the queue, which folds the owed permits in as if returned at the pop. A durable consumer's
blocking receiver takes a run of messages under one lock (``take_run_for_thread``); every clear
bumps ``generation``, so a run taken before it is dropped, as the queue it came from was.

A zero queue (``receiver_queue_size`` 0, the official zero-queue consumer) never prefetches:
a receiver with nothing queued asks for one entry (``ask_one``: FLOW 1), and asks again only
once that entry arrived (``entry_arrived``) or the subscription started afresh.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable

from client.message import Message
from client.message_id import MessageId

__all__ = ["ReceiverQueue"]


class ReceiverQueue:
    """The queue of one consumer; ``send_flow(permits)`` writes FLOW if it can (True: sent)."""

    __slots__ = (
        "_asked",
        "_by_cluster",
        "_flow_threshold",
        "_is_open",
        "_last_taken",
        "_lock",
        "_owed",
        "_owed_flush",
        "_permits",
        "_run_size",
        "_send_flow",
        "_settle_every_take",
        "_thread_wakeup",
        "arrived",
        "bulk_takes",
        "generation",
        "messages",
        "threads_waiting",
        "zero",
    )

    def __init__(
        self,
        size: int,
        send_flow: Callable[[int], bool],
        is_open: Callable[[], bool],
        *,
        settle_every_take: bool,
        bulk_takes: bool = False,
    ) -> None:
        # Never rebound: the consumer's receive paths hold on to it.
        self.messages: deque[Message] = deque()
        self.arrived = asyncio.Event()
        # The last message handed out (a reader resumes after it); its id is made only when
        # asked for (``last_taken``), not once per message.
        self._last_taken: Message | None = None
        self._by_cluster: dict[str, Message] = {}  # last taken on clusters left (``moved``)
        self._send_flow = send_flow
        self._is_open = is_open
        self._permits = 0  # consumed since the last FLOW
        #: A zero queue: FLOW only through ``ask_one`` (the threshold is never reached).
        self.zero = size == 0
        self._asked = False  # a zero queue's FLOW 1 is outstanding
        self._flow_threshold = max(1, size // 2) if size else 1 << 62
        # A blocking receiver returns its permits in groups of this size (``take_for_thread``).
        self._owed_flush = max(1, self._flow_threshold // 4)
        # Handing out needs bookkeeping on the loop (ack timeout, dead letters) for every take.
        self._settle_every_take = settle_every_take
        #: Blocking receivers may take runs of messages (``take_run_for_thread``): a durable
        #: consumer without per-take bookkeeping (a reader's ``last_taken`` must be exact).
        self.bulk_takes = bulk_takes and not settle_every_take
        self._run_size = min(self._owed_flush, 128)
        #: Bumped by every ``clear``: runs taken before are stale.
        self.generation = 0
        self._lock = threading.Lock()
        self._owed = 0
        #: Blocking receivers waiting in other threads for the queue to fill.
        self.threads_waiting = 0
        self._thread_wakeup = threading.Event()

    # --- on the loop ------------------------------------------------------------------------

    def append(self, message: Message) -> None:
        self.messages.append(message)
        self.arrived.set()  # ``wake``, inline: once per message received
        if self.threads_waiting:
            self._wake_threads()

    def wake(self) -> None:
        """Something was queued (or the consumer closes): wake receivers on the loop and in
        other threads."""
        self.arrived.set()
        if self.threads_waiting:
            self._wake_threads()

    def _wake_threads(self) -> None:
        if not self._thread_wakeup.is_set():
            # Set once per wait, not once per message that arrives before the waiter runs
            # (``Event.set`` takes a lock and notifies). Safe: the waiter clears the event
            # before it looks at the queue, so a set seen here is one it has not consumed.
            self._thread_wakeup.set()

    @property
    def last_taken(self) -> MessageId | None:
        """The id of the last message handed out (None: none since the last reset)."""
        message = self._last_taken
        return None if message is None else message.message_id()

    def forget_last_taken(self) -> None:
        self._last_taken = None

    def moved(self, left: str, cluster: str) -> None:
        """The consumer moved from cluster ``left`` to ``cluster`` (service URLs): the last
        message taken is kept for a return to ``left``, and the one taken on ``cluster``, if
        it was used before, is the last one again (ids of one cluster mean nothing on another)."""
        if self._last_taken is not None:
            self._by_cluster[left] = self._last_taken
        self._last_taken = self._by_cluster.pop(cluster, None)

    def handed_out(self, message: Message) -> None:
        """A message left the queue for the application: it owes the broker one permit."""
        self._last_taken = message
        self._permits += 1
        if self._permits >= self._flow_threshold:
            self.return_permits(0)

    def return_permits(self, count: int) -> None:
        self._permits += count
        if self._permits >= self._flow_threshold and self._send_flow(self._permits):
            self._permits = 0

    def reset_permits(self) -> None:
        """A fresh subscription: FLOW starts from the whole queue again."""
        self._permits = 0
        self._asked = False

    def ask_one(self) -> None:
        """A zero queue's receiver has nothing queued: one entry, unless one is on its way."""
        if not self._asked and self._send_flow(1):
            self._asked = True

    def entry_arrived(self) -> None:
        """A zero queue's entry arrived (queued, filtered or discarded): its permit is used."""
        self._asked = False

    def owes_permits(self) -> bool:
        """Whether a blocking receiver took messages whose permits are not returned yet."""
        return self._owed != 0

    def flow_owed(self) -> bool:
        """Whether the permits blocking receivers owe would make a FLOW due: before waiting,
        a receiver settles only then (the broker could stall otherwise). Below the threshold
        the broker still holds more than a quarter of the queue's permits (the owed ones are
        settled every ``_owed_flush`` takes), so waking the loop would buy nothing."""
        owed = self._owed
        return owed != 0 and (owed < 0 or owed + self._permits >= self._flow_threshold)

    def settle_owed(self) -> None:
        """Return the permits of the messages blocking receivers took."""
        with self._lock:
            owed, self._owed = self._owed, 0
        if owed:
            self.return_permits(owed)

    def clear(self) -> int:
        """Drop every queued message (the broker sends them again); how many there were."""
        with self._lock:
            dropped = len(self.messages)
            self.messages.clear()
            self.generation += 1
            self._permits += self._owed  # taken before the clear: returned by then
            self._owed = 0
        return dropped

    # --- on other threads -------------------------------------------------------------------

    def take_for_thread(self) -> tuple[Message, bool] | None:
        """Thread-safe: the next queued message, or None. With it comes whether the caller must
        settle on the loop (``AsyncConsumer.settle_taken``) before any acknowledgement of it:
        always when handing out needs bookkeeping, else only every few messages, to return the
        permits owed so far in one go."""
        with self._lock:
            if not self.messages:
                return None
            message = self.messages.popleft()
            self._owed += 1
            self._last_taken = message
            settle = self._settle_every_take or self._owed >= self._owed_flush
        return message, settle

    def take_run_for_thread(self) -> tuple[list[Message], int, bool] | None:
        """Thread-safe, for ``bulk_takes``: up to a permit group's worth of queued messages
        (one lock for the run, not one per message), the ``generation`` they belong to, and
        whether to settle on the loop; None when nothing is queued. Their permits are owed
        at once, so a run waiting in the receiver counts as handed out (a clear folds them)."""
        with self._lock:
            messages = self.messages
            count = min(len(messages), self._run_size)
            if not count:
                return None
            popleft = messages.popleft
            run = [popleft() for _ in range(count)]
            self._owed += count
            self._last_taken = run[-1]
            return run, self.generation, self._owed >= self._owed_flush

    def give_back_for_thread(self, run: list[Message], generation: int) -> None:
        """Thread-safe: put the untaken rest of a run back at the head of the queue (a
        ``batch_receive`` on the loop is to see it first), unless a clear made it stale. Its
        permits are no longer owed (below zero if already settled: taken back at the next
        settle)."""
        with self._lock:
            if generation == self.generation and run:
                self.messages.extendleft(reversed(run))
                self._owed -= len(run)

    def wait_for_thread(self, timeout: float | None) -> None:
        """Thread-safe: block the calling thread (not the loop) until a message is queued, the
        consumer closes, or ``timeout`` seconds pass; the caller then looks again. Much cheaper
        than a round trip through the loop for every message that is not queued yet."""
        with self._lock:
            # Register before looking at the queue: an enqueue either happened before the look
            # (seen here) or after the registration (it sets the event).
            self.threads_waiting += 1
            self._thread_wakeup.clear()
            empty = not self.messages and self._is_open()
        try:
            if empty:
                self._thread_wakeup.wait(timeout)
        finally:
            with self._lock:
                self.threads_waiting -= 1
