"""EntryCache: blocks of consecutive entries, FIFO eviction by bytes, against a dict model
(``get_run`` per entry; ``cached_run``, the hot path's memory-only read, as the cached prefix)."""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict

from broker.storage.cache import EntryCache


def test_cache_matches_a_per_entry_fifo_model() -> None:
    rng = random.Random(11)
    for _ in range(40):
        limit = rng.randint(1, 400)
        cache = EntryCache(limit)
        model: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        blocks: list[list[tuple[int, int]]] = []
        next_entry = {1: 0, 2: 0, 3: 0}
        for _ in range(30):
            ledger = rng.choice([1, 2, 3])
            entries = [rng.randbytes(rng.randint(0, 60)) for _ in range(rng.randint(1, 6))]
            first = next_entry[ledger]
            next_entry[ledger] += len(entries)
            cache.put_block(ledger, first, entries)
            # Model: a block that does not fit keeps its newest entries that do.
            kept = list(enumerate(entries, start=first))
            while kept and sum(len(e) for _, e in kept) > limit:
                kept.pop(0)
            if kept:
                keys = [(ledger, i) for i, _ in kept]
                model.update({(ledger, i): e for i, e in kept})
                blocks.append(keys)
                while sum(len(model[k]) for block in blocks for k in block) > limit:
                    for key in blocks.pop(0):
                        del model[key]
            if rng.random() < 0.1:
                gone = rng.choice([1, 2, 3])
                cache.discard_ledger(gone)
                blocks = [b for b in blocks if b[0][0] != gone]
                model = OrderedDict((k, v) for k, v in model.items() if k[0] != gone)
            for probe_ledger in (1, 2, 3):
                top = next_entry[probe_ledger] + 2
                low = rng.randint(0, top)
                high = rng.randint(low, top)
                expected = [model.get((probe_ledger, i)) for i in range(low, high)]
                assert cache.get_run(probe_ledger, low, high) == expected
                cached_prefix = list(itertools.takewhile(lambda e: e is not None, expected))
                assert cache.cached_run(probe_ledger, low, high) == cached_prefix
            assert cache.size_bytes == sum(len(v) for v in model.values())
            assert cache.size_bytes <= limit


def test_clear_and_counters() -> None:
    cache = EntryCache(100)
    cache.put_block(1, 0, [b"a", b"b"])
    assert cache.get_run(1, 0, 3) == [b"a", b"b", None]
    assert (cache.hits, cache.misses) == (2, 1)
    cache.clear()
    assert cache.get_run(1, 0, 2) == [None, None]
    assert cache.size_bytes == 0


def test_the_lock_and_maps_are_made_by_the_first_put() -> None:
    """Issue #26: an idle topic's cache holds no lock and no map; reads before the first put
    miss (and are counted), trimming and clearing it make nothing."""
    cache = EntryCache(100)
    assert (cache._lock, cache._blocks, cache._starts) == (None, None, None)
    assert cache.get_run(1, 0, 2) == [None, None]
    assert cache.cached_run(1, 0, 2) == []
    cache.discard_ledger(1)
    cache.clear()
    assert (cache._lock, cache._blocks, cache._starts) == (None, None, None)
    assert (cache.hits, cache.misses, cache.size_bytes) == (0, 2, 0)
    cache.put_block(1, 0, [b"a", b"b"])
    assert cache._lock is not None
    assert cache.cached_run(1, 0, 5) == [b"a", b"b"]
    assert cache.get_run(2, 0, 1) == [None]
    cache.clear()  # lets the maps go; the next put makes them again, with the same lock
    lock = cache._lock
    assert (cache._blocks, cache._starts) == (None, None)
    assert cache.get_run(1, 0, 1) == [None]
    cache.put_block(1, 2, [b"c"])
    assert cache._lock is lock
    assert cache.get_run(1, 2, 3) == [b"c"]
    cache.discard_ledger(1)
    assert cache.get_run(1, 2, 3) == [None]
    assert cache.size_bytes == 0
