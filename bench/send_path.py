"""Issue #17 part 4: P2 alone (unbatched 100 B, dedup on, fsync on, 1000 in flight), N runs.

One pinned broker (CPU 0), the raw generator on CPU 1, ``--runs`` runs of ``--count`` entries;
prints each run and the median / range of entries/s and broker CPU µs per entry as JSON.
``--profile FILE`` samples the broker with py-spy during the runs (py-spy is not a project
dependency: pass its path with ``--py-spy``) and writes a speedscope/raw profile to FILE.

    .venv/bin/python bench/send_path.py [--runs 3] [--count 300000] [--profile out.txt]
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy raw output file")
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy executable")
    args = parser.parse_args()
    pin_generator()
    root = Path(tempfile.mkdtemp(prefix="magnetar-send-path-"))
    runs: list[dict[str, Any]] = []
    try:
        with scenarios.broker_on(root) as broker:
            spy = None
            if args.profile is not None:
                command = [args.py_spy, "record", "--pid", str(pid_of(broker)), "--format", "raw"]
                command += ["--rate", "200", "--output", str(args.profile), "--nonblocking"]
                spy = subprocess.Popen(
                    command,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            for _ in range(args.runs):
                options = scenarios.raw_options(broker, count=args.count, size=100, dedup=Dedup.ON)
                result = scenarios.measured_produce(broker, options)
                runs.append(result)
                print(
                    f"{result['entries_per_s']:.0f} entries/s, "
                    f"{result['broker_cpu_us_per_entry']:.2f} us broker CPU/entry",
                    file=sys.stderr,
                )
            if spy is not None:
                spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
                spy.wait(60)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = {
        "entries_per_s": scenarios.spread([r["entries_per_s"] for r in runs], 0),
        "broker_cpu_us_per_entry": scenarios.spread(
            [r["broker_cpu_us_per_entry"] for r in runs], 2
        ),
        "broker_cpu_share": scenarios.spread([r["broker_cpu_share"] for r in runs], 2),
        "latency_us_p50": scenarios.spread([r["latency_us"]["p50"] for r in runs], 0),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
