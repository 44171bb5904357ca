"""A read that times out before the end of its range (``pollTimeoutMs``): slow, or lost?

An executor reads exactly ``[start, end)`` of a partition, ranges the planner saw exist. If no
message comes within ``pollTimeoutMs`` while the partition still holds messages up to ``end``
(its last message id is at or past the message before ``end``), nothing is lost: the broker is
slow. Returning the messages read so far would make the micro-batch shorter than its replay, so
the sink's order-free numbering would see another set of rows; with ``failOnDataLoss=false``
that used to happen silently. The read fails instead (``RangeTimeout``, whatever
``failOnDataLoss`` says) and Spark retries the task. Only when the partition no longer reaches
``end`` (deleted and re-created) is it data loss, handled by ``failOnDataLoss``.
"""

from __future__ import annotations

from client.message_id import MessageId
from spark_connector.positions import Position

__all__ = ["RangeTimeout", "range_still_exists", "range_timeout_message"]


class RangeTimeout(RuntimeError):
    """An executor's read of a range that exists timed out: the task fails (Spark retries)."""


def range_still_exists(last: MessageId, end: Position) -> bool:
    """Whether the partition's last message (``last``) is at or past the one before ``end``."""
    if last.entry_id() < 0:
        return False
    after = Position.after_message(last.ledger_id(), last.entry_id(), last.batch_index())
    return after >= end


def range_timeout_message(topic: str, end: Position) -> str:
    return (
        f"dedup-topic: no message of {topic} within pollTimeoutMs before the end {end} of the "
        "range, although the partition still holds it: failing the read rather than returning "
        "a short range (Spark retries the task; raise pollTimeoutMs for a slow broker)"
    )
