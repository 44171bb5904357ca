"""The exactly-once sink's producer, created while the task's rows are still arriving.

An exactly-once task cannot send its first row before it has seen its last one (the rows are
numbered in an order fixed by their set: ``row_order``), so everything it needs before that
first send is on the task's critical path unless done while the rows arrive. Creating the
producer is such a step: a topic lookup and a PRODUCER round trip (on a topic the broker has
not loaded yet, loading it too: several milliseconds, tens on a busy machine). ``EarlyProducer``
starts it on a helper thread when the first row arrives, and the task takes the producer when
it sends its first batch.

Only the creation moves. What the sink checks with the producer (the checkpoint-reset guard,
no silent expiry, the replay guard) still runs when the task takes it, on the task's first
row after the sort, exactly as with a producer created then; a task whose rows all fail
before that closes the producer unused (nothing was sent through it). Creation errors
(``ProducerBusy`` after its retries, a timeout) are raised when the task takes the producer,
where a creation on the spot would have raised them.

Only a task with one target (the ``topic`` option naming a topic that is not partitioned, no
``partition`` column) knows its producer before its rows: others open theirs as rows reach
each target.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait

import pyarrow as pa

from client.sync import Producer

__all__ = ["EarlyProducer"]

logger = logging.getLogger(__name__)

Opener = Callable[[], tuple[str, Producer] | None]


class EarlyProducer:
    """One producer being created on a helper thread (``open`` returns its target and the
    producer, or None when the task has no single target)."""

    def __init__(self, open_: Opener) -> None:
        self._open = open_
        self._future: Future[tuple[str, Producer] | None] | None = None

    def start(self) -> None:
        """Start creating the producer (once)."""
        if self._future is not None:
            return
        future: Future[tuple[str, Producer] | None] = Future()
        self._future = future

        def run() -> None:
            try:
                future.set_result(self._open())
            except BaseException as exc:  # raised again in the task's thread by ``take``
                future.set_exception(exc)

        threading.Thread(target=run, name="dedup-topic-open", daemon=True).start()

    def watch(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` unchanged, starting the creation when the first row goes through
        (Spark calls the writer for empty partitions too: they create nothing)."""
        for batch in batches:
            if batch.num_rows:
                self.start()
            yield batch

    def wait(self) -> None:
        """Wait until the creation started (if any) has ended, without taking its result."""
        if self._future is not None:
            wait([self._future])

    def take(self, target: str) -> Producer | None:
        """The producer for ``target`` (waiting for its creation), or None when none was
        started or it was made for another target (then closed).

        Raises:
            Exception: whatever the creation raised.
        """
        future, self._future = self._future, None
        if future is None:
            return None
        made = future.result()
        if made is None:
            return None
        made_for, producer = made
        if made_for == target:
            return producer
        _close(producer)
        return None

    def discard(self) -> None:
        """Close the producer if the task never took it (waits for its creation)."""
        future, self._future = self._future, None
        if future is None:
            return
        try:
            made = future.result()
        except Exception:
            return  # never created: nothing to close (the task failed for another reason)
        if made is not None:
            _close(made[1])


def _close(producer: Producer) -> None:
    try:
        producer.close()
    except Exception:
        logger.warning("closing producer %s failed", producer.producer_name(), exc_info=True)
