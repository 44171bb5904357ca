"""``protocol.send_identity``: the SEND and the stored entry give an entry the same identity."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import pb
from protocol.batch import SingleMessage, encode_batch
from protocol.metadata import encode_entry, parse_entry_metadata
from protocol.send_identity import (
    EXACT_SCAN_MAX_MESSAGES,
    exact_batch_highest,
    highest_sequence_id,
    of_metadata,
    of_send,
)
from tests.heavy_sends import empty_record_batch

ids = st.integers(min_value=0, max_value=2**63 - 1)


@settings(max_examples=300, deadline=None)
@given(ids, st.one_of(st.none(), ids), st.integers(min_value=1, max_value=1000))
def test_send_and_replay_agree(first: int, stated: int | None, num_messages: int) -> None:
    """What the publish path decides on arrival is what the dedup replay reads back."""
    send = pb.CommandSend(producer_id=1, sequence_id=first, num_messages=num_messages)
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=first, publish_time=1)
    if num_messages > 1:
        metadata.num_messages_in_batch = num_messages
    if stated is not None:
        send.highest_sequence_id = stated
        metadata.highest_sequence_id = stated
    sequence_id, high, count = of_send(send)
    name, replay_first, replay_high = of_metadata(parse_entry_metadata(encode_entry(metadata, b"")))
    assert (sequence_id, count) == (first, num_messages)
    assert (name, replay_first, replay_high) == ("p", first, high)
    assert high == highest_sequence_id(first, stated, num_messages)


def test_the_rule() -> None:
    assert highest_sequence_id(10, None, 1) == 10
    assert highest_sequence_id(10, None, 5) == 14  # a C++ batch: first id only
    assert highest_sequence_id(10, 12, 5) == 12  # stated (Java client): taken as is
    assert highest_sequence_id(10, 3, 1) == 10  # below the first id: max, as Java
    assert highest_sequence_id(10, None, 0) == 10


def test_a_send_without_num_messages_counts_one() -> None:
    assert of_send(pb.CommandSend(producer_id=1, sequence_id=4)) == (4, 4, 1)


def _gapped_batch(ids: list[int]) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=ids[0], publish_time=1, num_messages_in_batch=len(ids)
    )
    return encode_entry(metadata, encode_batch([SingleMessage(b"", sequence_id=i) for i in ids]))


def test_exact_highest_reads_per_message_ids_up_to_the_bound() -> None:
    ids = [2 * i for i in range(EXACT_SCAN_MAX_MESSAGES)]
    assert exact_batch_highest(_gapped_batch(ids), 7) == ids[-1]
    # One more message: the estimate (Java reads no batch at all), at no cost per record.
    assert exact_batch_highest(_gapped_batch([*ids, ids[-1] + 2]), 7) == 7


def test_a_huge_batch_of_empty_records_keeps_the_estimate() -> None:
    entry, count = empty_record_batch("p", 5)
    assert count > 100 * EXACT_SCAN_MAX_MESSAGES
    assert exact_batch_highest(entry, 5 + count - 1) == 5 + count - 1
