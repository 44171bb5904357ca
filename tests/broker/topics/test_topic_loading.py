"""Loading, unloading and deleting a topic are never cut short by a requester going away.

Found by the session fuzzer: a PRODUCER's connection closed while its topic was loading in a
disk thread; the cancelled request released the topic's load lock, and a second load opened
the same folder while the first thread still recovered it (one's cursor temp file vanished
under the other's cleanup). The thread cannot be stopped, so the lock must cover it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from broker.service import BrokerService
from broker.storage.files import OsFileLayer
from protocol.topic_name import TopicName
from tests.helpers import broker_config

TOPIC = TopicName.parse("persistent://public/default/gated")


class GatedLayer(OsFileLayer):
    """Real files; the first ``mkdir`` of the topic's folder waits until ``release`` is set."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._gated = True

    def mkdir(self, path: Path) -> None:
        if self._gated and path.name == "gated":
            self._gated = False
            self.entered.set()
            self.release.wait(10)
        super().mkdir(path)


class CountingService(BrokerService):
    """Counts ``_load_sync`` calls (disk threads) running at once, and in all."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.loads = 0
        self.running = 0
        self.most_at_once = 0
        self._count_lock = threading.Lock()

    def _load_sync(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        with self._count_lock:
            self.loads += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            return super()._load_sync(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            with self._count_lock:
                self.running -= 1


async def test_a_load_whose_requester_is_cancelled_finishes_before_any_other(
    tmp_path: Path,
) -> None:
    service = CountingService(broker_config(tmp_path / "data"))
    layer = GatedLayer()
    service.file_layer = layer
    try:
        first = asyncio.create_task(service.get_topic(TOPIC, create=True))
        assert await asyncio.to_thread(layer.entered.wait, 10)
        first.cancel()  # its connection closed while the disk thread loads
        second = asyncio.create_task(service.get_topic(TOPIC, create=True))
        done, _ = await asyncio.wait([first], timeout=10)
        assert first in done
        assert first.cancelled()
        assert not second.done()  # waits for the first load instead of starting its own
        layer.release.set()
        topic = await asyncio.wait_for(second, 10)
        assert service.topics[TOPIC.full_name] is topic
        assert service.loads == 1  # the second requester got the first load's topic
        assert service.most_at_once == 1
    finally:
        layer.release.set()
        await service.close_topics()


async def test_an_unload_whose_requester_is_cancelled_still_closes_the_topic(
    tmp_path: Path,
) -> None:
    service = BrokerService(broker_config(tmp_path / "data"))
    try:
        topic = await service.get_topic(TOPIC, create=True)
        close_started = asyncio.Event()
        ledger_closed = threading.Event()
        close_topic, close_ledger = topic.close, topic.ledger.close

        async def observed_close() -> None:
            close_started.set()
            await close_topic()

        def observed_ledger_close() -> None:
            close_ledger()
            ledger_closed.set()

        topic.close = observed_close  # type: ignore[method-assign]
        topic.ledger.close = observed_ledger_close  # type: ignore[method-assign]
        unload = asyncio.create_task(service.unload_topic(TOPIC))
        await close_started.wait()
        unload.cancel()  # mid-close: the closing must still run to its end
        reloaded = await service.get_topic(TOPIC, create=True)
        assert ledger_closed.is_set()  # before the folder was loaded again
        assert reloaded is not topic
        assert unload.cancelled()
    finally:
        await service.close_topics()
