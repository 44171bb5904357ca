"""Storage errors under a deduplicating producer (R7, Pulsar #5218), with the official client.

The broker's file layer fails 1 % of the segment writes and fsyncs with EIO or ENOSPC (every
100th call, alternating, so the count is deterministic). Each failure fails a group commit: the
client gets a SEND_ERROR, reconnects and resends everything pending. Promise checked: no message
lost, none duplicated, order kept, and the broker keeps serving afterwards.
"""

from __future__ import annotations

import errno
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from broker.storage.files import FileLayer
from tests.helpers import BrokerThread, broker_config, new_client, read_all

pytestmark = [pytest.mark.integration, pytest.mark.compat]


class EveryNthFails(FileLayer):
    """Fails every ``period``-th ``pwrite``/``fdatasync`` on a segment file (real I/O otherwise),
    alternating EIO and ENOSPC, while ``armed``."""

    def __init__(self, period: int = 100) -> None:
        self.period = period
        self.armed = True
        self.calls = 0
        self.failures: list[tuple[str, int]] = []
        self._paths: dict[int, Path] = {}
        self._lock = threading.Lock()

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        self._paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        super().close(fd)

    def _maybe_fail(self, operation: str, fd: int) -> None:
        path = self._paths.get(fd)
        # Segment files, including pre-allocated spares (``spare-*.seg.tmp``) renamed into place.
        if not self.armed or path is None or ".seg" not in path.name:
            return
        with self._lock:
            self.calls += 1
            if self.calls % self.period:
                return
            code = errno.EIO if len(self.failures) % 2 == 0 else errno.ENOSPC
            self.failures.append((operation, code))
        raise OSError(code, os.strerror(code), str(path))

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self._maybe_fail("pwrite", fd)
        return super().pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        self._maybe_fail("fdatasync", fd)
        super().fdatasync(fd)


@pytest.mark.parametrize("batching", [False, True])
def test_injected_eio_and_enospc_lose_and_duplicate_nothing(tmp_path: Path, batching: bool) -> None:
    layer = EveryNthFails(period=100)
    # Infinite retention: each failure rolls the segment, and without it the dedup cursor's
    # snapshots would let the consumed segments be trimmed before the reader checks them.
    config = broker_config(
        tmp_path / "data", default_retention_time_in_minutes=-1, default_retention_size_in_mb=-1
    )
    broker = BrokerThread(config, file_layer=layer).start()
    topic = f"persistent://public/default/faults-{uuid.uuid4().hex[:8]}"
    count = 8000 if batching else 6000
    acked: set[int] = set()
    errors: list[pulsar.Result] = []
    lock = threading.Lock()
    client = new_client(broker.url)
    try:
        producer = client.create_producer(
            topic,
            producer_name="faulty-disk",
            batching_enabled=batching,
            batching_max_messages=4,
            batching_max_publish_delay_ms=1,
            send_timeout_millis=0,
            block_if_queue_full=True,
            # A short pipeline makes small group commits: hundreds of writes and fsyncs, so
            # 1 % of them is several failures.
            max_pending_messages=64,
        )

        def done(seq: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def callback(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
                with lock:
                    if result == pulsar.Result.Ok:
                        acked.add(seq)
                    else:
                        errors.append(result)

            return callback

        for seq in range(1, count + 1):
            producer.send_async(f"{seq}".encode(), done(seq), sequence_id=seq)
        deadline = time.monotonic() + 90
        while len(acked) < count and time.monotonic() < deadline:
            time.sleep(0.2)
        assert errors == []
        assert len(acked) == count
        assert len(layer.failures) >= 3  # the faults did bite
        assert {code for _, code in layer.failures} == {errno.EIO, errno.ENOSPC}

        layer.armed = False
        stored = [int(data) for data in read_all(client, topic)]
        assert stored == list(range(1, count + 1))  # no loss, no duplicate, in order

        # The broker keeps serving: a new producer on the same topic and one on another topic.
        producer.send(b"after", sequence_id=count + 1)
        other = client.create_producer(topic + "-other")
        other.send(b"x")
        assert read_all(client, topic)[-1] == b"after"
    finally:
        client.close()
        broker.stop()
