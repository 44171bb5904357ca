"""Model test of the compactor itself (Hypothesis, no network): random keyed, unkeyed and
deleting messages, single or in batches (compressed or not), and incremental compactions; after
every compaction the view holds exactly the model's survivors, in log order, at their original
positions."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.compaction.compactor import compact
from broker.storage import Ledger, LedgerConfig, OsFileLayer, Position
from broker.storage.compacted_view import CompactedView
from tests.broker.compaction.test_compactor import batch, messages, single

Message = tuple[str | None, bytes]
keys = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))
message = st.tuples(keys, st.one_of(st.just(b""), st.binary(min_size=1, max_size=3)))
write = st.one_of(
    st.tuples(st.just("single"), st.lists(message, min_size=1, max_size=1), st.just(0)),
    st.tuples(st.just("batch"), st.lists(message, min_size=1, max_size=5), st.sampled_from([0, 1])),
)
no_messages: list[Message] = []
step: st.SearchStrategy[tuple[str, list[Message], int]] = st.one_of(
    write, st.just(("compact", no_messages, 0))
)


def survivors(log: list[tuple[Position, int, Message]]) -> list[tuple[Position, Message]]:
    latest: dict[str, tuple[Position, int]] = {}
    for position, index, (key, value) in log:
        if key is None:
            continue
        if value:
            latest[key] = (position, index)
        else:
            latest.pop(key, None)
    return [
        (position, (key, value))
        for position, index, (key, value) in log
        if key is None or latest.get(key) == (position, index)
    ]


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=12))
def test_view_equals_the_model(steps: list[tuple[str, list[Message], int]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        ledger = Ledger.open(Path(folder) / "t", LedgerConfig(sync_data=False))
        view = CompactedView.empty()
        log: list[tuple[Position, int, Message]] = []
        compacted: list[tuple[Position, int, Message]] = []
        try:
            for kind, items, compression in steps:
                if kind == "compact":
                    horizon = ledger.last_confirmed_position
                    if horizon is None or horizon <= view.horizon:
                        continue
                    view, _ = compact(ledger, OsFileLayer(), view, horizon, lambda _: None)
                    compacted = list(log)
                    got = [(p, (k, v)) for p, k, v in messages(view)]
                    assert got == survivors(compacted)
                    continue
                data = single(*items[0]) if kind == "single" else batch(items, compression)
                position = ledger.append(data)
                ledger.flush()
                if kind == "single":
                    log.append((position, -1, items[0]))
                else:
                    log += [(position, i, item) for i, item in enumerate(items)]
        finally:
            ledger.close()
