"""Which implementation the package exports: the switch, the fallback, and the suite on both.

* This process: the compiled one, unless ``MAGNETAR_PURE_PYTHON=1`` (then the reference). In
  ``make test`` the extension is built, so a build that silently failed fails here.
* An interpreter where the extension cannot be imported (as on a machine without a compiler)
  gets the reference and one log line saying so.
* The protocol tests and the SEND-path integration tests pass on the reference too
  (a subprocess with ``MAGNETAR_PURE_PYTHON=1``; this file is left out of it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from protocol import _accel, _speedups, checksum, framing, metadata, receipts, send_identity
from protocol.commands import consumers

REPO = Path(__file__).resolve().parents[2]
PURE = os.environ.get(_accel.PURE_PYTHON_ENV) == "1"

#: Integration tests of the SEND path: frames and entries refused, dedup, chunks, the
#: connection's decoding; and of a client's MESSAGE path; about 25 s.
SEND_PATH_TESTS = [
    "tests/integration/test_bad_entries.py",
    "tests/integration/test_malformed_input.py",
    "tests/integration/test_dedup_client.py",
    "tests/integration/test_chunking.py",
    "tests/broker/connection/test_connection.py",
    # The MESSAGE path of a client: frames, entries, batches, acknowledgements.
    "tests/client/consumer/test_entries.py",
    "tests/client/consumer/test_async_consumer.py",
]

EXPORTS = [
    (framing, "FrameDecoder", framing.PyFrameDecoder, _speedups.FrameDecoder),
    (metadata, "SendEntryChecker", metadata.PySendEntryChecker, _speedups.SendEntryChecker),
    (metadata, "decode_entry", metadata.py_decode_entry, _speedups.decode_entry),
    (metadata, "decode_entry_plain", metadata.py_decode_entry_plain, _speedups.decode_entry_plain),
    (consumers, "ack_entries", consumers.py_ack_entries, _speedups.ack_entries),
    (receipts, "ReceiptEncoder", receipts.PyReceiptEncoder, _speedups.ReceiptEncoder),
    (send_identity, "of_send", send_identity.py_of_send, _speedups.of_send),
    (checksum, "crc32c", checksum.py_crc32c, _speedups.crc32c),
]


def test_the_exports_follow_the_switch() -> None:
    for module, name, reference, compiled in EXPORTS:
        assert getattr(module, name) is (reference if PURE else compiled), name


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != _accel.PURE_PYTHON_ENV}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# Imports the package as the broker does and prints which decoder it got, after a SEND decoded.
PROBE = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
{prelude}
from protocol import commands, framing, metadata, receipts, send_identity, checksum
decoder = framing.FrameDecoder()
decoder.feed(commands.send(1, 2, b"\\x00\\x00\\x00\\x00", num_messages=3))
print(send_identity.of_send(next(decoder).command.send))
for module, name in ((framing, "FrameDecoder"), (metadata, "SendEntryChecker"),
                     (metadata, "decode_entry"),
                     (receipts, "ReceiptEncoder"), (send_identity, "of_send"),
                     (checksum, "crc32c")):
    print(name, getattr(module, name).__module__)
"""


def test_without_the_extension_the_reference_runs_and_says_so() -> None:
    # None in sys.modules makes the import fail as a missing file would.
    result = _run_python(PROBE.format(prelude='sys.modules["protocol._speedups"] = None'))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "(2, 4, 3)"
    assert all(line.split()[1].startswith("protocol.") for line in lines[1:])
    assert not any("_speedups" in line for line in lines[1:])
    warnings = [line for line in result.stderr.splitlines() if "compiled SEND path" in line]
    assert len(warnings) == 1, result.stderr  # once per process, not once per module
    assert warnings[0].startswith("WARNING protocol: the compiled SEND path is not available")


def test_the_switch_picks_the_reference_and_says_so() -> None:
    result = _run_python(PROBE.format(prelude=""), MAGNETAR_PURE_PYTHON="1")
    assert result.returncode == 0, result.stderr
    assert not any("_speedups" in line for line in result.stdout.splitlines()[1:])
    assert result.stderr.count("MAGNETAR_PURE_PYTHON is set") == 1


def test_by_default_the_compiled_path_runs() -> None:
    result = _run_python(PROBE.format(prelude=""))
    assert result.returncode == 0, result.stderr
    assert all("_speedups" in line for line in result.stdout.splitlines()[1:])
    assert "SEND path" not in result.stderr


def test_protocol_and_send_path_tests_pass_on_the_reference() -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    # The test_speedups files compare both implementations directly: once is enough.
    command += ["tests/protocol", *SEND_PATH_TESTS, "--ignore-glob", "*/test_speedups*"]
    result = subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, _accel.PURE_PYTHON_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.splitlines()[-1]
