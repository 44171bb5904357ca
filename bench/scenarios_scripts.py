"""Issue #26's figures measured by standalone scripts, wired into ``run_all.py`` so that
``make bench`` prints them with their goals like P1-P8:

* ``keys``: ``bench_idempotency.py`` (idempotency keys: keyed / unkeyed ``Topic.publish``
  throughput, the window filling and the window full, goal >= 0.9 both; bytes per key in the
  window, goal <= 100);
* ``cluster``: ``bench_cluster.py`` with the default bundles (4 per namespace) and balancing,
  no takeover (aggregate durable ingest of 2 brokers against 1, goal >= 1.8). It starts etcd
  (``make etcd`` installs it; ``make bench`` does).

Each runs as a subprocess with its JSON read back; a script that fails is reported with the
end of its stderr instead of stopping the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


def _run(script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": done.stderr[-2000:], "returncode": done.returncode}
    return result


def idempotency_keys(keys: int, messages: int) -> dict[str, Any]:
    # A full-window keyed run is ``snapshots`` windows long; it must also outlast the cursor
    # persistence interval (1 s), or no cursor write falls inside it and the script refuses the
    # figure: a small window (``--quick``) takes more snapshots per run.
    snapshots = max(3, 300_000 // keys)
    report = _run(
        "bench_idempotency.py",
        "--keys",
        str(keys),
        "--messages",
        str(messages),
        "--steady-snapshots",
        str(snapshots),
    )
    if "error" in report:
        return report
    ratio = report["goals"]["keyed_over_unkeyed_throughput"]["measured"]
    full = report["goals"]["keyed_over_unkeyed_throughput_full_window"]["measured"]
    per_key = report["goals"]["bytes_per_key_in_the_window"]["measured"]
    throughput, steady = report["throughput"], report["throughput_full_window"]
    return {
        "what": "bench_idempotency.py: Topic.publish of single-message entries with a key "
        "each vs none, on a real ledger, rounds alternated; window memory by tracemalloc",
        "keys": keys,
        "keyed_over_unkeyed": round(ratio, 3),
        "keyed_over_unkeyed_per_round": [
            round(r, 3) for r in throughput["ratio_per_round_min_median_max"]
        ],
        "msgs_per_s_with_keys": round(throughput["msgs_per_s_with_keys"]),
        "msgs_per_s_without_keys": round(throughput["msgs_per_s_without_keys"]),
        # The window full (``keys`` keys): every key accepted evicts one, and a snapshot of
        # the whole window is taken every ``keys`` entries inside the timed runs.
        "keyed_over_unkeyed_full_window": round(full, 3),
        "keyed_over_unkeyed_full_window_per_round": [
            round(r, 3) for r in steady["ratio_per_round_min_median_max"]
        ],
        "snapshot_ms_on_loop_full_window": round(steady["snapshot_ms_on_loop_median"], 2),
        "bytes_per_key": round(per_key, 1),
        "goal": "keyed / unkeyed >= 0.9 (fresh and full window); <= 100 B per key",
        "goal_met": ratio >= 0.9 and full >= 0.9 and per_key <= 100,
    }


def two_brokers(messages: int) -> dict[str, Any]:
    report = _run(
        "bench_cluster.py", "--bundles", "4", "--skip-takeover", "--messages", str(messages)
    )
    if "error" in report:
        return report
    ingest = report["ingest_4_bundles"]
    one, two = ingest["runs"]
    ratio = ingest["ratio_2_vs_1"]
    return {
        "what": "bench_cluster.py: a partitioned topic (8) written by raw generators (batches "
        "of 1000 x 100 B, durable), 1 broker then 2, default bundles and balancing",
        "dd_fdatasync_mb_s": report["dd_fdatasync_mb_s"],
        "one_broker_mb_s": one["mb_per_s"],
        "two_brokers_mb_s": two["mb_per_s"],
        "partitions_per_broker": two["partitions_per_broker"],
        "cpu_busy_one_two": [one["cpu_busy"], two["cpu_busy"]],
        "ratio_2_vs_1": ratio,
        # Both brokers write to this machine's one disk: two can write at most what dd does,
        # so this is the highest ratio the machine allows, whatever the placement.
        "disk_ceiling_2_vs_1": round(report["dd_fdatasync_mb_s"] / one["mb_per_s"], 2),
        "goal": "2 brokers / 1 broker >= 1.8",
        "goal_met": ratio >= 1.8,
    }
