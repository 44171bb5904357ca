"""Sequence ids, the checkpoint-reset guard and the cursor's acknowledgements (pure, no JVM)."""

from __future__ import annotations

import pytest

from protocol.hashing import murmur3_32_hash
from spark_connector.cursor import cursor_target
from spark_connector.options import OptionError
from spark_connector.positions import EARLIEST, Position
from spark_connector.sink import CheckpointReset, check_not_reset, route, sequence_id


def test_sequence_ids_grow_across_batches() -> None:
    assert sequence_id(0, 0) == 0
    assert sequence_id(1, 0) == 1 << 32
    assert sequence_id(1, 5) < sequence_id(2, 0)
    with pytest.raises(ValueError):
        sequence_id(0, 1 << 32)
    with pytest.raises(ValueError):
        sequence_id(-1, 0)


def test_guard_allows_a_replay_and_refuses_a_reset() -> None:
    check_not_reset(-1, 0, "p")  # new producer
    check_not_reset(sequence_id(3, 9), 3, "p")  # replay of batch 3
    check_not_reset(sequence_id(3, 9), 4, "p")  # next batch
    with pytest.raises(CheckpointReset, match="checkpoint was reset"):
        check_not_reset(sequence_id(3, 0), 2, "p")


def test_cursor_keeps_the_resume_entry() -> None:
    cumulative, batch = cursor_target(Position(4, 10, 0), None)
    assert cumulative is not None
    assert batch is None
    assert (cumulative.ledger_id(), cumulative.entry_id()) == (4, 9)
    # Inside a batch of 5: indexes 0..2 acknowledged one by one (PIP-54).
    cumulative, batch = cursor_target(Position(4, 10, 3), 5)
    assert batch is not None
    assert (batch.entry_id(), batch.batch_index(), batch.batch_size()) == (10, 2, 5)
    # Past the entry, or size unknown: only entries before it.
    assert cursor_target(Position(4, 10, 5), 5)[1] is None
    assert cursor_target(Position(4, 10, 3), None)[1] is None
    assert cursor_target(Position(4, 0, 0), None) == (None, None)
    assert cursor_target(EARLIEST, None) == (None, None)


def test_route_explicit_partition_wins_then_key_hash_then_blocks() -> None:
    assert route(3, "k", 0, 4, 10) == 3
    assert route(None, "k", 7, 4, 10) == murmur3_32_hash(b"k") % 4
    # Keyless rows: blocks of ``block`` rows, round-robin, starting at ``first``.
    assert [route(None, None, i, 4, 2, first=1) for i in range(8)] == [1, 1, 2, 2, 3, 3, 0, 0]
    # Not partitioned (0) or one partition: always 0.
    assert {
        route(None, key, i, n, 1) for key in (None, "a", "b") for i in range(5) for n in (0, 1)
    } == {0}


def test_route_refuses_a_partition_the_topic_does_not_have() -> None:
    with pytest.raises(OptionError, match="has 4 partitions"):
        route(4, None, 0, 4, 1)
    with pytest.raises(OptionError, match="is not partitioned"):
        route(1, None, 0, 0, 1)
    with pytest.raises(OptionError, match="has 4 partitions"):
        route(-1, None, 0, 4, 1)
