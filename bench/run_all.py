"""``make bench``: machine limits, then P1-P8 of issue #17 and issue #26's pulsar-lite
comparison and topic-scale figures (``scenarios_scale``), idempotency keys and two brokers
(``scenarios_scripts``), as ONE JSON document.

Writes ``bench/results/latest.json`` (and prints it) and ``bench/results/latency.png`` (P4's
and P8's publish-latency percentile curves). Each figure is the median of ``--runs`` runs with
its range. Sizes are in ``scenarios.Scale``; ``--quick`` shrinks them to check the suite runs.
The ``bench_*.py`` scripts are standalone micro-benchmarks; ``--micro`` adds their output
(each run with its defaults, as this script did before issue #17) under ``"micro"``.

    .venv/bin/python bench/run_all.py [--quick] [--only P1,P4] [--data-root DIR] [--micro]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import machine, scenarios, scenarios_scale, scenarios_scripts  # noqa: E402
from bench.pinned_broker import pin_generator  # noqa: E402
from client.perf.plot import plot_histograms  # noqa: E402

RESULTS = REPO / "bench" / "results"
QUICK = scenarios.Scale(
    runs=3,
    dd_mib=64,
    append_seconds=0.5,
    p1_messages=100_000,
    p2_messages=20_000,
    p4_seconds=1.0,
    p5_messages=50_000,
    p6_entries=50_000,
    p6_producers=1_000,
    p7_producers=5_000,
    p7_connections=500,
    p8_batched_messages=20_000,
    p8_unbatched_messages=5_000,
)


def run_suite(
    root: Path,
    scale: scenarios.Scale,
    only: set[str],
    sizes: scenarios_scale.ScaleSizes = scenarios_scale.FULL_SIZES,
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine.describe(),
        "scale": scale.__dict__,
    }
    started = time.perf_counter()
    timeline: list[dict[str, Any]] = []
    histograms = {}

    def timed(name: str, measure: Callable[[], Any]) -> Any:
        """Run one scenario and note when (to read it against the load samples)."""
        begun = time.perf_counter()
        at = time.strftime("%H:%M:%SZ", time.gmtime())
        result = measure()
        timeline.append({"what": name, "from": at, "seconds": round(time.perf_counter() - begun)})
        return result

    def wanted(name: str) -> bool:
        return not only or name in only

    limits = timed("machine_limits", lambda: scenarios.machine_limits(root, scale))
    document["machine_limits"] = limits
    if wanted("P1"):
        dd = limits["dd_conv_fdatasync_mb_s"]["median"]
        document["P1"] = timed("P1", lambda: scenarios.p1_batched_ingest(root, scale, dd))
    if wanted("P2") or wanted("P3"):
        document["P2"], document["P3"] = timed(
            "P2+P3", lambda: scenarios.p2_p3_unbatched(root, scale)
        )
    if wanted("P4"):
        document["P4"], runs = timed("P4", lambda: scenarios.p4_latency(root, scale))
        histograms.update({f"magnetar-perf raw, run {i + 1}": h for i, h in enumerate(runs)})
    if wanted("P5"):
        document["P5"] = timed("P5", lambda: scenarios.p5_dispatch(root, scale))
    if wanted("P6"):
        document["P6"] = timed("P6", lambda: scenarios.p6_load_time(root, scale))
    if wanted("P7"):
        document["P7"] = timed("P7", lambda: scenarios.p7_memory(root, scale))
    if wanted("P8"):
        document["P8"], runs = timed("P8", lambda: scenarios.p8_official(root, scale))
        histograms.update({f"pulsar-client, run {i + 1}": h for i, h in enumerate(runs)})
    # Issue #26: pulsar-lite side by side, 10,000 active topics, 100,000 idle ones.
    if wanted("peer"):
        document["peer"] = timed("peer", lambda: scenarios_scale.peer_comparison(root, sizes))
    if wanted("topics"):
        document["topics"] = timed("topics", lambda: scenarios_scale.many_topics(root, sizes))
    if wanted("idle"):
        document["idle"] = timed("idle", lambda: scenarios_scale.idle_topics(root, sizes))
    if wanted("keys"):
        document["keys"] = timed(
            "keys", lambda: scenarios_scripts.idempotency_keys(sizes.keys, sizes.key_messages)
        )
    if wanted("cluster"):
        document["cluster"] = timed(
            "cluster", lambda: scenarios_scripts.two_brokers(sizes.cluster_messages)
        )
    document["timeline"] = timeline
    document["suite_seconds"] = round(time.perf_counter() - started, 1)
    if histograms:
        RESULTS.mkdir(exist_ok=True)
        plot_histograms(
            histograms, RESULTS / "latency.png", "publish latency at 10k msgs/s (unbatched, fsync)"
        )
        document["plot"] = "bench/results/latency.png"
    return document


def run_micro_benchmarks() -> dict[str, object]:
    """Every ``bench_*.py`` script, one JSON document each (keyed by script name)."""
    results: dict[str, object] = {}
    for script in sorted((REPO / "bench").glob("bench_*.py")):
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, check=False
        )
        try:
            results[script.stem] = json.loads(done.stdout)
        except json.JSONDecodeError:
            results[script.stem] = {"error": done.stderr[-2000:], "returncode": done.returncode}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the suite runs")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated subset, e.g. P1,P4 (also peer, topics, idle, keys, cluster)",
    )
    parser.add_argument("--data-root", type=Path, default=None, help="where data dirs go")
    parser.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--micro", action="store_true", help="also run the bench_*.py scripts")
    args = parser.parse_args()
    pin_generator()
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.data_root))
    try:
        scale = QUICK if args.quick else scenarios.Scale()
        with machine.LoadMonitor() as load:
            only = {p.strip() for p in args.only.split(",") if p.strip()}
            sizes = scenarios_scale.QUICK_SIZES if args.quick else scenarios_scale.FULL_SIZES
            document = run_suite(root, scale, only, sizes)
        document["load"] = load.summary()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.micro:
        document["micro"] = run_micro_benchmarks()
    text = json.dumps(document, indent=2)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
