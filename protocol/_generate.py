"""Regenerate ``protocol/_pb`` from ``protocol/PulsarApi.proto``.

Usage: ``python -m protocol._generate [--out DIR]`` (``make proto`` runs it without arguments).

Produces ``PulsarApi_pb2.py`` (protoc's Python generator, loaded by the upb runtime) and
``PulsarApi_pb2.pyi`` (mypy-protobuf stubs). The protoc shipped in ``grpcio-tools`` is used so
no system compiler is needed. The generated files are committed; a test regenerates them into a
temporary directory and fails when the committed copies are stale.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
PROTO_FILE = PROTO_DIR / "PulsarApi.proto"
DEFAULT_OUT = PROTO_DIR / "_pb"


class GenerationError(RuntimeError):
    """protoc failed or a tool is missing."""


def _mypy_plugin() -> str:
    # Prefer the plugin installed next to this interpreter (the venv), then PATH.
    beside = Path(sys.executable).parent / "protoc-gen-mypy"
    if beside.exists():
        return str(beside)
    found = shutil.which("protoc-gen-mypy")
    if found is None:
        raise GenerationError("protoc-gen-mypy not found: install mypy-protobuf")
    return found


def generate(out_dir: Path = DEFAULT_OUT) -> list[Path]:
    """Compile the proto into ``out_dir`` and return the files written.

    Raises:
        GenerationError: protoc reported an error or the mypy plugin is missing.
    """
    from grpc_tools import protoc  # type: ignore[import-untyped]  # build-time dependency only

    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO_DIR}",
        f"--plugin=protoc-gen-mypy={_mypy_plugin()}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        str(PROTO_FILE),
    ]
    status = protoc.main(args)
    if status != 0:
        raise GenerationError(f"protoc exited with status {status}")
    return [out_dir / "PulsarApi_pb2.py", out_dir / "PulsarApi_pb2.pyi"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    options = parser.parse_args(argv)
    for path in generate(options.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
