"""The compactor's rules on a real ledger (no network): latest per key, empty value deletes,
unkeyed kept, batches compacted per message (compressed too), positions kept; and the view file:
atomic, CRC-checked, orphans dropped on load."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.compaction.compactor import compact, compaction_input, phase_one
from broker.storage import CorruptLedgerError, Ledger, LedgerConfig, OsFileLayer, Position
from broker.storage.compacted_view import CompactedView, load_view, open_view, view_file, write_view
from protocol import pb
from protocol.batch import SingleMessage, decode_batch, encode_batch
from protocol.compression import decode as decompress
from protocol.compression import encode as compress
from protocol.metadata import decode_entry, encode_entry


def single(key: str | None, value: bytes, seq: int = 0) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    if key is not None:
        md.partition_key = key
    return encode_entry(md, value)


def batch(items: list[tuple[str | None, bytes]], compression: int = 0) -> bytes:
    plain = encode_batch(SingleMessage(payload=v, partition_key=k) for k, v in items)
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=len(items)
    )
    if compression:
        md.compression = compression  # type: ignore[assignment]
        md.uncompressed_size = len(plain)
    return encode_entry(md, compress(compression, plain))


def ledger_with(tmp_path: Path, entries: list[bytes]) -> Ledger:
    ledger = Ledger.open(tmp_path / "t", LedgerConfig(sync_data=False))
    for data in entries:
        ledger.append(data)
    ledger.flush()
    return ledger


def messages(view: CompactedView) -> list[tuple[Position, str | None, bytes]]:
    out: list[tuple[Position, str | None, bytes]] = []
    for position, data in view.iter_entries():
        md, payload = decode_entry(data)
        if md.HasField("num_messages_in_batch"):
            plain = decompress(md.compression, payload, md.uncompressed_size)
            batch_messages = decode_batch(plain, md.num_messages_in_batch)
            out.extend((position, m.partition_key, m.payload) for m in batch_messages)
        else:
            key = md.partition_key if md.HasField("partition_key") else None
            out.append((position, key, payload))
    return out


def test_latest_per_key_deletes_and_unkeyed(tmp_path: Path) -> None:
    entries = [single("a", b"1"), single(None, b"x"), single("a", b"2"), single("b", b"1")]
    entries += [single("b", b""), single("c", b"1")]
    ledger = ledger_with(tmp_path, entries)
    horizon = ledger.last_confirmed_position
    assert horizon is not None
    view, report = compact(ledger, OsFileLayer(), CompactedView.empty(), horizon, lambda _: None)
    got = [(key, value) for _, key, value in messages(view)]
    assert got == [(None, b"x"), ("a", b"2"), ("c", b"1")]
    assert report.keys == 2  # a and c; b was deleted
    assert view.horizon == horizon
    first = ledger.next_position(ledger.before_first_position())
    assert [p for p, _, _ in messages(view)] == [
        Position(first.ledger_id, 1),
        Position(first.ledger_id, 2),
        Position(first.ledger_id, 5),
    ]
    ledger.close()


@pytest.mark.parametrize("compression", [0, 1, 3], ids=["none", "lz4", "zstd"])
def test_batches_are_compacted_per_message(tmp_path: Path, compression: int) -> None:
    entries = [
        batch([("a", b"1"), ("b", b"1"), (None, b"n"), ("c", b"1")], compression),
        batch([("a", b"2"), ("c", b"")], compression),
        batch([("d", b"1")], compression),
    ]
    ledger = ledger_with(tmp_path, entries)
    horizon = ledger.last_confirmed_position
    assert horizon is not None
    view, _ = compact(ledger, OsFileLayer(), CompactedView.empty(), horizon, lambda _: None)
    assert [(k, v) for _, k, v in messages(view)] == [
        ("b", b"1"),
        (None, b"n"),
        ("a", b"2"),
        ("d", b"1"),
    ]
    # The last batch keeps every message: its bytes are copied unchanged.
    assert dict(view.iter_entries())[horizon] == entries[2]
    ledger.close()


def test_incremental_compaction_reads_the_previous_view_then_the_log(tmp_path: Path) -> None:
    ledger = ledger_with(tmp_path, [single("a", b"1"), single("b", b"1")])
    first_horizon = ledger.last_confirmed_position
    assert first_horizon is not None
    old, _ = compact(ledger, OsFileLayer(), CompactedView.empty(), first_horizon, lambda _: None)
    ledger.append(single("a", b"2"))
    ledger.flush()
    horizon = ledger.last_confirmed_position
    assert horizon is not None
    assert [p for p, _ in compaction_input(ledger, old, horizon)] == [*old.positions, horizon]
    latest, entries, _ = phase_one(compaction_input(ledger, old, horizon))
    assert entries == 3  # the view's two, then the log's one
    assert latest == {"a": (horizon, -1), "b": (old.positions[1], -1)}
    ledger.close()


def test_view_file_is_checked_and_orphans_are_dropped(tmp_path: Path) -> None:
    layer = OsFileLayer()
    entries = [(Position(3, 0), b"zero"), (Position(3, 4), b"four")]
    path = write_view(layer, tmp_path, 1, Position(3, 9), entries)
    view = open_view(path, 1)
    assert view.read(Position(3, 1), 10, 1 << 20) == [(Position(3, 4), b"four")]
    assert view.next_after(Position(3, 0)) == Position(3, 4)
    # An orphan of an interrupted compaction (the next generation) is deleted on load.
    write_view(layer, tmp_path, 2, Position(3, 12), entries)
    assert load_view(layer, tmp_path, 1).positions == [Position(3, 0), Position(3, 4)]
    assert not view_file(tmp_path, 2).exists()
    # A flipped bit is detected.
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLedgerError):
        open_view(path, 1)
    with pytest.raises(ValueError, match="position order"):
        write_view(layer, tmp_path, 3, Position(3, 9), list(reversed(entries)))
    assert not list(tmp_path.glob("*.tmp"))
