"""protocol/_keys.pxi against its reference protocol/idempotency_scan.py: the same digests and
verdicts on generated entries, batches and junk; the reference against upb on valid metadata."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import _speedups, idempotency_scan, pb
from protocol.batch import SingleMessage, encode_batch
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY
from protocol.idempotency_scan import (
    KeyScanBudget,
    py_key_digest,
    py_quick_key,
    py_scan_batch,
    py_scan_metadata,
)
from protocol.metadata import encode_entry

KEY = IDEMPOTENCY_KEY_PROPERTY
names = st.sampled_from([KEY, "other", KEY + "x", "", "magnetar"])
values = st.one_of(st.just(""), st.text(max_size=40))
properties = st.lists(st.tuples(names, values), max_size=6)


@st.composite
def metadata(draw: st.DrawFn) -> pb.MessageMetadata:
    md = pb.MessageMetadata(producer_name="p", sequence_id=draw(st.integers(0, 99)))
    md.publish_time = 1
    for name, value in draw(properties):
        md.properties.add(key=name, value=value)
    if draw(st.booleans()):
        md.num_messages_in_batch = draw(st.integers(-3, 6))
    if draw(st.booleans()):
        md.compression = draw(st.sampled_from([0, 1, 2, 3, 4]))  # type: ignore[assignment]
        md.uncompressed_size = draw(st.integers(0, 1 << 32 - 1))
    if draw(st.booleans()):
        md.num_chunks_from_msg = draw(st.integers(-1, 3))
    if draw(st.booleans()):
        md.encryption_keys.add(key="k", value=b"v")
    return md


COMPILED = {
    "scan_metadata": _speedups.scan_key_metadata,
    "scan_batch": _speedups.scan_key_batch,
    "quick_key": _speedups.quick_key,
}


def both(function: str, *args: object) -> object:
    """The compiled and reference answers of one call (an exception is an answer)."""
    answers = []
    for implementation in (COMPILED[function], getattr(idempotency_scan, "py_" + function)):
        try:
            answers.append(("ok", implementation(*args)))
        except KeyScanBudget as exc:
            answers.append(("budget", str(exc)))
    assert answers[0] == answers[1], answers
    return answers[0][1]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_digest_is_blake2b_128(data: bytes) -> None:
    expected = hashlib.blake2b(data, digest_size=16).digest()
    assert _speedups.key_digest(data) == py_key_digest(data) == expected
    assert _speedups.key_digest(bytearray(data)) == expected


def test_digest_at_every_length_across_block_and_word_edges() -> None:
    """The last block's words are assembled from the input (zero padding in registers): every
    length from 0 to 3 blocks, so each partial word and block edge (127, 128, 129, 256) is hit."""
    data = bytes(range(256)) + bytes(range(255, -1, -1))
    for size in range(3 * 128 + 1):
        expected = hashlib.blake2b(data[:size], digest_size=16).digest()
        assert _speedups.key_digest(data[:size]) == expected, size


@settings(max_examples=800, deadline=None)
@given(metadata(), st.binary(max_size=20), st.integers(0, 8))
def test_metadata_scan_agrees_with_the_reference_and_upb(
    md: pb.MessageMetadata, payload: bytes, max_properties: int
) -> None:
    entry = encode_entry(md, payload)
    scanned = both("scan_metadata", entry, max_properties)
    # The oracle: upb's parse, as the key check read entries before issue #26.
    if md.num_chunks_from_msg > 1 or md.encryption_keys:
        assert scanned is None
        return
    first = next((kv.value for kv in md.properties if kv.key == KEY), None)
    if first is not None and len(md.properties) > max_properties:
        return  # refused: both said so above
    assert scanned is not None
    size, count, compression, declared, digest = scanned  # type: ignore[misc]
    assert count == (md.num_messages_in_batch if md.HasField("num_messages_in_batch") else -1)
    assert (compression, declared) == (md.compression, md.uncompressed_size)
    assert digest == (py_key_digest(first.encode()) if first else None)
    assert entry[4 + size :] == payload


@settings(max_examples=800, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 3))
def test_junk_gets_the_same_answer(junk: bytes, max_properties: int) -> None:
    for entry in (junk, len(junk).to_bytes(4, "big") + junk, b"\0\0\0\x05" + junk):
        both("scan_metadata", entry, max_properties)
        both("quick_key", entry, 100, max_properties)
        both("scan_batch", entry, 3, 64, max_properties)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, int]:
    messages = [
        SingleMessage(draw(st.binary(max_size=8)), properties=dict(draw(properties)))
        for _ in range(draw(st.integers(0, 6)))
    ]
    payload = encode_batch(messages)
    cut = draw(st.one_of(st.none(), st.integers(0, max(len(payload) - 1, 0))))
    if cut is not None:
        payload = payload[:cut]
    return payload, len(messages) + draw(st.sampled_from([0, 0, 0, -1, 1]))


@settings(max_examples=800, deadline=None)
@given(batches(), st.integers(0, 400), st.integers(0, 10))
def test_batch_scan_agrees_with_the_reference(
    batch: tuple[bytes, int], header_budget: int, max_properties: int
) -> None:
    payload, count = batch
    both("scan_batch", payload, count, header_budget, max_properties)


@settings(max_examples=500, deadline=None)
@given(metadata(), st.binary(max_size=20), st.integers(0, 200))
def test_quick_key_agrees_and_answers_only_what_it_knows(
    md: pb.MessageMetadata, payload: bytes, max_header: int
) -> None:
    entry = encode_entry(md, payload)
    quick = both("quick_key", entry, max_header, 4)
    if quick is False:
        assert KEY.encode() not in entry
    elif quick is not None:
        scanned = py_scan_metadata(entry, 4)
        assert scanned is not None
        assert scanned[1] < 0
        assert scanned[4] == quick


def test_a_key_in_clear_read_the_same_way_in_a_batch() -> None:
    payload = encode_batch([SingleMessage(b"a", properties={KEY: "k1"}), SingleMessage(b"b")])
    assert py_scan_batch(payload, 2, 1000, 10) == [py_key_digest(b"k1"), None]
    assert _speedups.scan_key_batch(payload, 2, 1000, 10) == [py_key_digest(b"k1"), None]
    with pytest.raises(KeyScanBudget):
        _speedups.scan_key_batch(payload, 2, 5, 10)
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    md.properties.add(key=KEY, value="single")
    assert py_quick_key(encode_entry(md, b"x"), 1000, 10) == py_key_digest(b"single")
