"""Background pre-allocation of the next segment file ("a segment ahead of need").

One daemon worker thread, shared by every ledger of the process by default, zero-fills spare
segment files so that a roll only renames a ready file. Zero-filling a few MiB takes tens of
milliseconds; doing it on the flush path would stall every producer of the topic for that long.
A ledger may be given its own executor (tests do, to control timing).
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, ThreadPoolExecutor

_shared: Executor | None = None
_shared_lock = threading.Lock()


def shared_preallocator() -> Executor:
    """The process-wide single-thread executor used when a ledger is given none."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ThreadPoolExecutor(max_workers=1, thread_name_prefix="segment-prealloc")
        return _shared
