"""No silent expiry: a micro-batch is not replayed once the broker may have forgotten its writes.

A broker forgets a producer's dedup state when the producer has been disconnected for
``brokerDeduplicationProducerInactivityTimeoutMinutes`` (360 by default, Pulsar and Magnetar).
A batch replayed later than that is written again: duplicates, and nothing would notice.

The sink knows the state is gone when the broker reports ``last_sequence_id = -1`` for its
producer (a forgotten name looks new). That is also what a genuinely new producer sees, so the
sink tells them apart by the batch's age: Spark records when it planned each micro-batch
(``batchTimestampMs`` in the checkpoint's ``offsets/<batch>``, written before any task ran and
kept as is by every replay), and every write of the batch happened after that. If the batch is
younger than the timeout, no producer that wrote it can have been idle that long: the state is
there, or was never needed. If it is older (with a 10% margin for clocks), an earlier attempt's
rows may be stored and forgotten: the task fails with ``DedupStateExpired``, naming the way out
(``brokerDeduplicationProducerInactivityTimeoutMinutes=0`` to replay anyway, accepting
duplicates).

The checkpoint is read with pyarrow's file systems (local, ``file:``, ``hdfs://``, ``s3://``,
``gs://``); a path it cannot open fails the check loudly too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

__all__ = ["DedupStateExpired", "batch_timestamp_ms", "check_replay_age"]

_MARGIN = 0.9


class DedupStateExpired(RuntimeError):
    """The batch is older than the broker keeps an idle producer's dedup state."""


def batch_timestamp_ms(checkpoint: str, batch_id: int) -> int:
    """When Spark planned micro-batch ``batch_id`` (``offsets/<batch_id>`` of ``checkpoint``).

    Raises:
        DedupStateExpired: the file cannot be read or holds no ``batchTimestampMs``.
    """
    try:
        text = _read(checkpoint.rstrip("/") + f"/offsets/{batch_id}")
        # "v1", the metadata line, then one line per source.
        metadata = json.loads(text.splitlines()[1])
        return int(metadata["batchTimestampMs"])
    except Exception as exc:
        raise DedupStateExpired(
            f"dedup-topic sink: cannot read when batch {batch_id} started from the checkpoint "
            f"{checkpoint!r} ({exc}); the sink needs it to know whether the broker may have "
            "forgotten the batch's writes. Set the sink option "
            "brokerDeduplicationProducerInactivityTimeoutMinutes=0 to skip this check."
        ) from exc


def _read(path: str) -> str:
    if "://" not in path and not path.startswith("file:"):
        return Path(path).read_text()
    from pyarrow import fs

    filesystem, inner = fs.FileSystem.from_uri(path)
    with filesystem.open_input_stream(inner) as stream:
        data: bytes = stream.read()
    return data.decode()


def check_replay_age(
    batch_started_ms: int,
    timeout_minutes: float,
    batch_id: int,
    producer_name: str,
    now_ms: int | None = None,
) -> None:
    """Refuse a batch older than the broker's inactivity timeout (pure but for the clock).

    Raises:
        DedupStateExpired: the batch started more than 90% of ``timeout_minutes`` ago.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    age_minutes = (now - batch_started_ms) / 60_000
    if timeout_minutes > 0 and age_minutes > _MARGIN * timeout_minutes:
        raise DedupStateExpired(
            f"dedup-topic sink: batch {batch_id} started {age_minutes:.1f} minutes ago and the "
            f"broker knows nothing of producer {producer_name!r}: it forgets an idle producer "
            f"after brokerDeduplicationProducerInactivityTimeoutMinutes={timeout_minutes:g}, "
            "so rows an earlier attempt of this batch stored may be written again. The sink "
            "refuses to replay the batch. To replay it anyway (accepting duplicates), restart "
            "with the sink option brokerDeduplicationProducerInactivityTimeoutMinutes=0; give "
            "the broker's value if it is not the default 360."
        )
