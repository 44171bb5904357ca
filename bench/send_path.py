"""Issue #17 part 4: P2 alone (unbatched 100 B, dedup on, fsync on, 1000 in flight), N runs.

A pinned broker (CPU 0) per run, the raw generator on CPU 1, ``--runs`` runs of ``--count``
entries; prints each run and the median / range of entries/s and broker CPU µs per entry as JSON.
``--implementations compiled,pure`` runs the SEND path's two implementations in turn (``pure`` =
a broker started with MAGNETAR_PURE_PYTHON=1) and reports each. ``--profile FILE`` samples the
broker with py-spy during the runs (py-spy is not a project dependency: pass its path with
``--py-spy``) and writes one raw profile per implementation, ``FILE.<implementation>``.

    .venv/bin/python bench/send_path.py [--runs 3] [--count 300000] \\
        [--implementations pure,compiled] [--profile out.txt --py-spy .venv/bin/py-spy]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import scenarios  # noqa: E402
from bench.pinned_broker import pid_of, pin_generator  # noqa: E402
from client.perf.options import Dedup  # noqa: E402
from protocol._accel import PURE_PYTHON_ENV  # noqa: E402

IMPLEMENTATIONS = ("compiled", "pure")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument(
        "--implementations",
        default="compiled",
        help="comma-separated, in run order: compiled (the default build), pure "
        "(MAGNETAR_PURE_PYTHON=1); rounds alternate between them, one broker each",
    )
    parser.add_argument("--profile", type=Path, default=None, help="py-spy raw output file")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy executable")
    args = parser.parse_args()
    implementations = [name.strip() for name in args.implementations.split(",") if name.strip()]
    if not implementations or set(implementations) - set(IMPLEMENTATIONS):
        parser.error(f"--implementations takes {', '.join(IMPLEMENTATIONS)}")
    pin_generator()
    root = Path(tempfile.mkdtemp(prefix="magnetar-send-path-"))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in implementations}
    try:
        # One run of each in turn, so both see the same machine load.
        for _ in range(args.runs):
            for name in implementations:
                runs[name].append(_one_run(root, name, args))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = {name: _summary(results) for name, results in runs.items()}
    print(json.dumps(summary if len(summary) > 1 else summary[implementations[0]], indent=2))


def _one_run(root: Path, implementation: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run on a fresh broker of ``implementation`` (the env var is read at its start)."""
    previous = os.environ.pop(PURE_PYTHON_ENV, None)
    if implementation == "pure":
        os.environ[PURE_PYTHON_ENV] = "1"
    try:
        with scenarios.broker_on(root) as broker:
            spy = None
            if args.profile is not None:
                output = args.profile.with_name(f"{args.profile.name}.{implementation}")
                command = [args.py_spy, "record", "--pid", str(pid_of(broker)), "--format", "raw"]
                command += ["--rate", "200", "--output", str(output), "--nonblocking"]
                spy = subprocess.Popen(
                    command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            options = scenarios.raw_options(broker, count=args.count, size=100, dedup=Dedup.ON)
            result = scenarios.measured_produce(broker, options)
            if spy is not None:
                spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
                spy.wait(60)
    finally:
        os.environ.pop(PURE_PYTHON_ENV, None)
        if previous is not None:
            os.environ[PURE_PYTHON_ENV] = previous
    print(
        f"{implementation}: {result['entries_per_s']:.0f} entries/s, "
        f"{result['broker_cpu_us_per_entry']:.2f} us broker CPU/entry",
        file=sys.stderr,
    )
    return result


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "entries_per_s": scenarios.spread([r["entries_per_s"] for r in runs], 0),
        "broker_cpu_us_per_entry": scenarios.spread(
            [r["broker_cpu_us_per_entry"] for r in runs], 2
        ),
        "broker_cpu_share": scenarios.spread([r["broker_cpu_share"] for r in runs], 2),
        "latency_us_p50": scenarios.spread([r["latency_us"]["p50"] for r in runs], 0),
    }


if __name__ == "__main__":
    main()
