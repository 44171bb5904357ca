"""Which SEND path the package runs: the compiled one (``protocol._speedups``) or the reference.

"The SEND path" for short: the compiled module also decodes MESSAGE frames and their entries
(``FrameDecoder``, ``decode_entry``), a client's side of the same wire.

The reference is the pure-Python code in ``framing``, ``metadata``, ``send_identity``,
``receipts`` and ``checksum``; each of those modules asks ``speedups()`` once, at import, and
exports the compiled class or function under the public name when there is one. The compiled
path is used unless

* ``MAGNETAR_PURE_PYTHON=1`` is set (tests run both ways; a bug report can rule it out), or
* the extension is missing (installed without a C compiler, or from a tree never built),

and in either case one log line says so. The choice is made once per process: modules that
imported a public name keep what they got.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

PURE_PYTHON_ENV = "MAGNETAR_PURE_PYTHON"

_log = logging.getLogger("protocol")
_chosen: list[Any] = []  # empty until decided: the module, or None for the reference


def speedups() -> Any:
    """The compiled module, or None when the pure-Python reference is to be used."""
    if not _chosen:
        _chosen.append(_load())
    return _chosen[0]


def _load() -> Any:
    if os.environ.get(PURE_PYTHON_ENV, "").strip().lower() in {"1", "true", "yes"}:
        _log.info("%s is set: the SEND path runs the pure-Python reference", PURE_PYTHON_ENV)
        return None
    try:
        # By name: the extension is no .py file, so tests/test_architecture.py would read a
        # static import of it as an import of the package itself (a circle that is not there).
        speedups = importlib.import_module("protocol._speedups")
    except ImportError as exc:
        _log.warning(
            "the compiled SEND path is not available (%s); running the pure-Python reference",
            exc,
        )
        return None
    return speedups
