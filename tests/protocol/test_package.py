"""protocol/ as a package: public re-exports and the sans-I/O import rule."""

from __future__ import annotations

import ast
from pathlib import Path

import protocol

ALLOWED_TOP_LEVEL = {
    "__future__",
    "collections",
    "dataclasses",
    "enum",
    "re",
    "struct",
    "typing",
    "argparse",
    "shutil",
    "sys",
    "pathlib",
    "crc32c",
    # mmh3: Pulsar's Murmur3-32 key hash, a pure function over bytes
    "mmh3",
    # cramjam: Pulsar's payload codecs, pure functions over bytes
    "cramjam",
    # hashlib: BLAKE2b-128 of idempotency keys (idempotency_scan.py), a pure function over bytes
    "hashlib",
    "grpc_tools",
    "protocol",
}
# _generate.py is a build tool (it runs protoc), not part of the runtime codec.
BUILD_TOOLS = {"_generate.py"}
# _accel.py picks the compiled SEND path once per process: it reads MAGNETAR_PURE_PYTHON and
# logs its choice, and does no other I/O.
SEAMS = {"_accel.py": {"importlib", "logging", "os"}}


def test_public_names_are_exported() -> None:
    for name in protocol.__all__:
        assert hasattr(protocol, name), name
    assert protocol.pb.BaseCommand.DESCRIPTOR.full_name == "pulsar.proto.BaseCommand"


def test_runtime_modules_do_no_io() -> None:
    package = Path(protocol.__file__).parent
    for path in sorted(p for p in package.rglob("*.py") if "_pb" not in p.parts):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        allowed = (
            ALLOWED_TOP_LEVEL
            if path.name in BUILD_TOOLS
            else ALLOWED_TOP_LEVEL - {"argparse", "shutil", "sys", "pathlib", "grpc_tools"}
        )
        allowed = allowed | SEAMS.get(path.name, set())
        assert imported <= allowed, f"{path.name} imports {sorted(imported - allowed)}"
