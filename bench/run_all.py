"""Run every benchmark script in bench/ and print one JSON document keyed by script name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    results: dict[str, object] = {}
    for script in sorted(HERE.glob("bench_*.py")):
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, check=False
        )
        try:
            results[script.stem] = json.loads(done.stdout)
        except json.JSONDecodeError:
            results[script.stem] = {"error": done.stderr[-2000:], "returncode": done.returncode}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
