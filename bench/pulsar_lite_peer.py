"""pulsar-lite (PyPI ``pulsar-lite``, the ``bench`` extra) as a standalone broker, pinned as ours.

Its wheel ships a Rust binary, ``pulsar-lite --addr HOST:PORT --db-path DIR`` (RocksDB storage,
Pulsar binary protocol, no HTTP admin); ``pulsar_lite.binary_finder`` locates it. The package's
own ``start_broker`` also works but logs to ``/tmp/pulsar-lite.log`` and scans ports from 6650,
so the suite starts the binary itself: on a free port, on CPU 0 (the child inherits the calling
thread's affinity, as in ``pinned_broker.start_pinned``), its log in the run's data directory.

Durability differs: pulsar-lite acknowledges a SEND once RocksDB has it in its write-ahead log
*without* an fsync (strace of 1,000 unbatched sends: ~3,000 ``write`` calls, 5 ``fdatasync``,
all at start-up), where Magnetar's default (``journalSyncData=true``) answers after an
fdatasync. The comparison therefore runs Magnetar both ways.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from bench.pinned_broker import BROKER_CPU, pin_generator


def binary() -> str:
    """The pulsar-lite executable; ImportError when the ``bench`` extra is not installed."""
    from pulsar_lite.binary_finder import find_pulsar_lite_binary

    return str(find_pulsar_lite_binary())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PulsarLite:
    """One pulsar-lite process on a fresh database; ``stop`` ends it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> PulsarLite:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [binary(), "--addr", f"127.0.0.1:{self.port}", "--db-path", str(self.data_dir)]
        os.sched_setaffinity(0, {BROKER_CPU})
        try:
            with (self.data_dir / "pulsar-lite.log").open("ab") as log:
                env = {**os.environ, "RUST_LOG": "warn"}
                self.proc = subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir, env=env
                )
        finally:
            pin_generator()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pulsar-lite exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)  # nothing to wait on but the port itself
        self.stop()
        raise TimeoutError(f"pulsar-lite did not listen on {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
