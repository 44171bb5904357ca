"""Persistence of the idempotency window (issue #16), exactly as PIP-6 persists its marks.

The pure state is ``broker.publish.idempotency_window.IdempotencyWindow``. Its snapshot lives on
the reserved cursor ``magnetar.idempotency``: the cursor's mark-delete is the last entry the
snapshot describes and its properties (``dict[str, int]``) carry

* ``"v"`` -> the snapshot format, 2 (absent in format 1);
* ``"d:" + digest.hex()`` -> ``((ledger_id << 64 | entry_id) << 21 | batch_index + 1) << 45 |
  stamp_ms`` (``broker.publish.idempotency_window.pack_location``) for every durable key of the
  window, named by its 16-byte digest (the position makes the sort order the acceptance order:
  keys are written in the order they are accepted, and the reader sorts by it);
* ``"h:<ledger>:<entry>"`` -> the bitmask of hidden batch indexes of that entry.

Format 1 (the builds before issue #26) named a key by the key itself, ``"k:" + key``, with the
same value; `decode_snapshot` reads both (a format-1 key is digested on load), so a new build
opens the snapshots an earlier one wrote (issue #22's upgrade rule); it writes format 2. A
format above 2 refuses the load, like a damaged cursor file: a newer build's window must not be
silently lost.

Recovery (in the loader thread, before any producer is admitted) restores the snapshot and
replays every entry after the mark-delete, reading only the keys (``entry_keys``). Keys met in
the replay are stamped with the recovery time: the window may outlive a crash by the replayed
span, never forget a key early (see ``broker.publish.idempotency_window`` on why the result is a
superset). A topic without the cursor gets one at its end, as PIP-6 does: it had no key before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial

from broker.config import BrokerConfig
from broker.metadata.policies import IDEMPOTENCY_WINDOW, PolicyStore
from broker.publish.idempotency_keys import KeyScanRefused, entry_keys
from broker.publish.idempotency_window import IDEMPOTENCY_CURSOR, IdempotencyWindow, WindowConfig
from broker.storage import Ledger, Position
from broker.storage.cursor_file import RenderedProperties
from protocol.enums import InitialPosition
from protocol.idempotency_scan import key_digest
from protocol.topic_name import TopicName

__all__ = [
    "FORMAT",
    "decode_snapshot",
    "encode_snapshot",
    "recover_window",
    "take_snapshot",
    "window_config_for",
    "window_config_from",
]

log = logging.getLogger(__name__)

_FORMAT_PROPERTY = "v"
FORMAT = 2
_V1_KEY_PREFIX = "k:"  # format 1: the key itself
_DIGEST_PREFIX = "d:"  # format 2: the key's digest, in hex
_HIDDEN_PREFIX = "h:"


def window_config_from(
    config: BrokerConfig, policy: Mapping[str, object] | None = None
) -> WindowConfig:
    """The broker settings overridden by the effective ``idempotencyWindow`` policy."""
    seconds: object = config.idempotency_window_seconds
    max_keys: object = config.idempotency_window_max_keys
    if policy:
        seconds = policy.get("idempotencyWindowSeconds", seconds)
        max_keys = policy.get("idempotencyWindowMaxKeys", max_keys)
    if not isinstance(seconds, int | float) or not isinstance(max_keys, int):
        raise ValueError(f"bad idempotencyWindow policy {policy!r}")
    return WindowConfig(
        window_seconds=float(seconds),
        max_keys=max_keys,
        max_uncompressed_bytes=config.max_message_size,
    )


def effective_window_policy(policies: PolicyStore, topic: TopicName) -> dict[str, object]:
    """The ``idempotencyWindow`` policy of ``topic``: its namespace's fields, overridden field by
    field by the topic's (either may be unset)."""
    merged: dict[str, object] = {}
    for level in (
        policies.namespace_policy(topic.namespace_name, IDEMPOTENCY_WINDOW),
        policies.topic_policy(topic.full_name, IDEMPOTENCY_WINDOW),
    ):
        if isinstance(level, dict):
            merged.update(level)
    return merged


def window_config_for(
    config: BrokerConfig, policies: PolicyStore, topic: TopicName
) -> WindowConfig:
    return window_config_from(config, effective_window_policy(policies, topic))


def encode_snapshot(
    records: list[tuple[bytes, int]], hidden: Mapping[Position, int]
) -> dict[str, int]:
    """The cursor properties of a snapshot (`IdempotencyWindow.snapshot_records`): format 2."""
    properties = {_DIGEST_PREFIX + digest.hex(): packed for digest, packed in records}
    return _with_format_and_hidden(properties, hidden)


def _with_format_and_hidden(
    properties: dict[str, int], hidden: Mapping[Position, int]
) -> dict[str, int]:
    properties[_FORMAT_PROPERTY] = FORMAT
    for position, mask in hidden.items():
        properties[f"{_HIDDEN_PREFIX}{position.ledger_id}:{position.entry_id}"] = mask
    return properties


def decode_snapshot(
    properties: Mapping[str, int],
) -> tuple[list[tuple[bytes, int]], dict[Position, int]]:
    """Inverse of `encode_snapshot`, for format 1 and 2: digests oldest first (whatever the order
    of the properties: the packed value sorts by position, i.e. by acceptance), and the hidden
    masks.

    Raises:
        ValueError: a format this build does not know.
    """
    version = properties.get(_FORMAT_PROPERTY, 1)
    if version not in (1, FORMAT):
        raise ValueError(f"idempotency snapshot format {version}: this build reads 1 and 2")
    packed_keys: list[tuple[int, bytes]] = []
    hidden: dict[Position, int] = {}
    for name, value in properties.items():
        if name.startswith(_DIGEST_PREFIX):
            packed_keys.append((value, bytes.fromhex(name[len(_DIGEST_PREFIX) :])))
        elif name.startswith(_V1_KEY_PREFIX):
            packed_keys.append((value, key_digest(name[len(_V1_KEY_PREFIX) :].encode())))
        elif name.startswith(_HIDDEN_PREFIX):
            ledger_id, entry_id = name[len(_HIDDEN_PREFIX) :].split(":")
            hidden[Position(int(ledger_id), int(entry_id))] = value
    packed_keys.sort()
    return [(digest, packed) for packed, digest in packed_keys], hidden


def recover_window(
    ledger: Ledger, config: WindowConfig, clock: Callable[[], float] = time.time
) -> IdempotencyWindow:
    """Snapshot plus replay; creates (and persists) the cursor at the end when it is missing."""
    started = time.monotonic()
    cursor = ledger.open_cursor(IDEMPOTENCY_CURSOR, InitialPosition.Latest)
    properties = cursor.properties
    snapshot_position: Position | None = cursor.mark_delete_position
    replay_from = ledger.next_position(cursor.mark_delete_position)
    if cursor.was_clamped:
        # The snapshot describes entries the log lost: ignore it and rebuild from the log.
        log.warning("%s: idempotency snapshot ahead of the log; replaying it", ledger.directory)
        properties, snapshot_position = {}, None
        replay_from = ledger.next_position(ledger.before_first_position())
    records, hidden = decode_snapshot(properties)
    window = IdempotencyWindow.restore(
        records, hidden, config=config, clock=clock, snapshot_position=snapshot_position
    )
    now = clock()
    replayed = refused = 0
    for position, entry in ledger.iter_entries(replay_from):
        try:
            found = entry_keys(entry, config.max_uncompressed_bytes)
        except KeyScanRefused:
            # Stored by a build without the bounds (or under a larger maxMessageSize): read as
            # keyless, so the replay stays as bounded per entry as the publish path.
            found = None
            refused += 1
        keys = found.keys if found is not None else ()
        window.replay(position, keys, is_batch=found is not None and found.is_batch, stamp=now)
        replayed += 1
    if refused:
        log.warning(
            "%s: idempotency replay read %d entries beyond the key check's bounds as keyless",
            ledger.directory,
            refused,
        )
    window.finish_replay()
    window.forget_hidden_before(ledger.first_position)
    window.recovery_seconds = time.monotonic() - started
    window.replayed_entries = replayed
    return window


def take_snapshot(ledger: Ledger, window: IdempotencyWindow) -> None:
    """Mark-delete the window's cursor at its last persisted entry with the window as its
    properties (in memory; the topic's cursor persistence writes it, as for PIP-6)."""
    position = window.last_persisted_position
    if position is None:
        return
    window.forget_hidden_before(ledger.first_position)
    # encode_snapshot(*window.snapshot_records()), made so that the event loop only copies the
    # window's durable slots: the cursor write (a worker thread) renders them as the JSON text
    # of the key properties, without the GIL, and splices it into the cursor document; a
    # dict of ~100k items cost ~27 ms of the loop and its json.dumps ~50-100 ms of the GIL
    # per snapshot (issue #26 item 6).
    keys, hidden = window.snapshot_copy()
    properties = RenderedProperties(
        partial(keys.json, _DIGEST_PREFIX), len(keys), _with_format_and_hidden({}, hidden)
    )
    ledger.open_cursor(IDEMPOTENCY_CURSOR).mark_delete(position, properties=properties)
