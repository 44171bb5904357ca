"""The official client's first operations on a damaged topic, run as a separate process by
``test_damaged_topic.py``.

A separate process because the C++ client's logger is process-wide and set by the first client
created: only a fresh process is sure to log into the handler here, and the broker's reason
(file and offset) reaches the application only through that log. Prints one JSON list, one item
per operation: ``{"operation", "error" (exception class or null), "seconds", "log"}``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable

import pulsar


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main(url: str, topic: str) -> None:
    logger = logging.getLogger("damaged-topic-client")
    lines = Lines()
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=logger)
    operations: dict[str, Callable[[], object]] = {
        "producer": lambda: client.create_producer(topic, producer_name="p"),
        "consumer": lambda: client.subscribe(topic, "sub"),
        "reader": lambda: client.create_reader(topic, pulsar.MessageId.earliest),
    }
    results = []
    for name, operation in operations.items():
        lines.lines.clear()
        started = time.monotonic()
        error: str | None = None
        try:
            operation()
        except pulsar.PulsarException as exc:
            error = type(exc).__name__
        results.append(
            {
                "operation": name,
                "error": error,
                "seconds": time.monotonic() - started,
                "log": list(lines.lines),
            }
        )
    print(json.dumps(results), flush=True)
    # No client.close() and no interpreter finalization: the C++ client's threads may still
    # log into the Python logger while the interpreter is torn down, which aborts the process
    # now and then (SIGABRT); the results are out, and the broker sees the socket close.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
