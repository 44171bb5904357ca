"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import _accel
from tests.helpers import BrokerThread, broker_config


def _bind_compiled_fallbacks() -> None:
    """With ``MAGNETAR_PURE_PYTHON=1`` the package runs its references and never binds the
    compiled module's fallbacks to them (each reference module does that only when it exports
    the compiled code). The tests that compare the two directly (``test_speedups_*`` and
    the like) still call the compiled module: bind its fallbacks here, as the package would,
    so the whole suite runs in either mode."""
    if _accel.speedups() is not None:
        return  # bound by the package itself
    try:
        from protocol import _speedups
    except ImportError:  # pragma: no cover - make test builds the extension
        return
    from broker.storage import recovery
    from protocol import batch_columns, dispatch_frames, framing, metadata, send_identity
    from protocol.commands import consumers

    _speedups.bind_framing(framing.Frame, framing._decode_frame)
    _speedups.bind_send_identity(send_identity.py_of_send)
    _speedups.bind_metadata(metadata.PySendEntryChecker, metadata.ChunkInfo)
    _speedups.bind_decode_entry(metadata.py_decode_entry, metadata.py_decode_entry_plain)
    _speedups.bind_ack_entries(consumers.py_ack_entries)
    _speedups.bind_acked_positions(consumers.py_acked_positions)
    _speedups.bind_dispatch(dispatch_frames.py_encode_messages)
    _speedups.bind_columns(batch_columns.BatchColumns, batch_columns.py_batch_columns)
    _speedups.bind_parse_entry_metadata(metadata.py_parse_entry_metadata, metadata.EntryMetadata)
    _speedups.bind_record_parts(recovery.py_encode_record_parts)


_bind_compiled_fallbacks()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    """A real in-process broker on 127.0.0.1:0 with its data in ``tmp_path``."""
    running = BrokerThread(broker_config(tmp_path / "data")).start()
    try:
        yield running
    finally:
        running.stop()
