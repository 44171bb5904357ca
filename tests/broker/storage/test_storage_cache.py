"""EntryCache and its per-ledger views: blocks of consecutive entries, FIFO eviction by bytes
over every ledger sharing the budget, against a dict model (``get_run`` per entry;
``cached_run``, the hot path's memory-only read, as the cached prefix)."""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict

from broker.storage.cache import EntryCache, LedgerCache


def test_cache_matches_a_per_entry_fifo_model() -> None:
    """Three ledgers (views) of one budget, each with three segments: one FIFO over all."""
    rng = random.Random(11)
    for _ in range(40):
        limit = rng.randint(1, 400)
        store = EntryCache(limit)
        views = [store.view() for _ in range(3)]
        model: OrderedDict[tuple[int, int, int], bytes] = OrderedDict()
        blocks: list[list[tuple[int, int, int]]] = []
        next_entry = {(v, s): 0 for v in range(3) for s in (1, 2, 3)}
        for _ in range(30):
            owner, ledger = rng.randrange(3), rng.choice([1, 2, 3])
            entries = [rng.randbytes(rng.randint(0, 60)) for _ in range(rng.randint(1, 6))]
            first = next_entry[owner, ledger]
            next_entry[owner, ledger] += len(entries)
            views[owner].put_block(ledger, first, entries)
            # Model: a block that does not fit keeps its newest entries that do.
            kept = list(enumerate(entries, start=first))
            while kept and sum(len(e) for _, e in kept) > limit:
                kept.pop(0)
            if kept:
                keys = [(owner, ledger, i) for i, _ in kept]
                model.update({(owner, ledger, i): e for i, e in kept})
                blocks.append(keys)
                while sum(len(model[k]) for block in blocks for k in block) > limit:
                    for key in blocks.pop(0):
                        del model[key]
            if rng.random() < 0.1:
                gone = (rng.randrange(3), rng.choice([1, 2, 3]))
                views[gone[0]].discard_ledger(gone[1])
                blocks = [b for b in blocks if b[0][:2] != gone]
                model = OrderedDict((k, v) for k, v in model.items() if k[:2] != gone)
            if rng.random() < 0.05:
                cleared = rng.randrange(3)
                views[cleared].clear()
                blocks = [b for b in blocks if b[0][0] != cleared]
                model = OrderedDict((k, v) for k, v in model.items() if k[0] != cleared)
            for probe_owner, probe_ledger in itertools.product(range(3), (1, 2, 3)):
                top = next_entry[probe_owner, probe_ledger] + 2
                low = rng.randint(0, top)
                high = rng.randint(low, top)
                expected = [model.get((probe_owner, probe_ledger, i)) for i in range(low, high)]
                view = views[probe_owner]
                assert view.get_run(probe_ledger, low, high) == expected
                cached_prefix = list(itertools.takewhile(lambda e: e is not None, expected))
                assert view.cached_run(probe_ledger, low, high) == cached_prefix
            for owner in range(3):
                owned = sum(len(v) for k, v in model.items() if k[0] == owner)
                assert views[owner].size_bytes == owned
            assert store.size_bytes == sum(len(v) for v in model.values())
            assert store.size_bytes <= limit


def test_one_budget_for_every_ledger() -> None:
    """managedLedgerCacheSizeMB bounds the broker, as in Pulsar: a busy ledger evicts a quiet
    one's oldest blocks, and the total never exceeds the budget however many ledgers share it."""
    store = EntryCache(1000)
    quiet, busy = store.view(), store.view()
    quiet.put_block(1, 0, [b"q" * 400])
    for entry_id in range(10):
        busy.put_block(1, entry_id, [b"b" * 300])
        assert store.size_bytes <= 1000
    assert quiet.get_run(1, 0, 1) == [None]
    assert quiet.size_bytes == 0
    assert busy.size_bytes == 900
    assert busy.cached_run(1, 7, 10) == [b"b" * 300] * 3


def test_clear_and_counters() -> None:
    store = EntryCache(100)
    cache, other = store.view(), store.view()
    cache.put_block(1, 0, [b"a", b"b"])
    other.put_block(1, 0, [b"x"])
    assert cache.get_run(1, 0, 3) == [b"a", b"b", None]
    assert (cache.hits, cache.misses) == (2, 1)
    cache.clear()  # this ledger's entries only
    assert cache.get_run(1, 0, 2) == [None, None]
    assert cache.size_bytes == 0
    assert other.get_run(1, 0, 1) == [b"x"]
    assert store.size_bytes == 1


def test_an_idle_view_holds_nothing_and_reads_miss_without_the_lock() -> None:
    """Issue #26: a loaded topic that never writes costs its view's four slots; reads miss
    (and are counted), trimming and clearing it leave the shared maps untouched."""
    store = EntryCache(100)
    cache = store.view()
    assert not hasattr(cache, "__dict__")
    assert LedgerCache.__slots__ == ("_owner", "_store", "hits", "misses")
    with store._lock:  # held: a read that took it would hang here
        assert cache.get_run(1, 0, 2) == [None, None]
        assert cache.cached_run(1, 0, 2) == []
        cache.discard_ledger(1)
        cache.clear()
    assert (store._owners, store._owner_bytes, len(store._blocks)) == ({}, {}, 0)
    assert (cache.hits, cache.misses, cache.size_bytes) == (0, 2, 0)
    cache.put_block(1, 0, [b"a", b"b"])
    assert cache.cached_run(1, 0, 5) == [b"a", b"b"]
    assert cache.get_run(2, 0, 1) == [None]
    cache.discard_ledger(1)
    assert cache.get_run(1, 0, 1) == [None]
    assert (store._owners, store._owner_bytes, len(store._blocks)) == ({}, {}, 0)
