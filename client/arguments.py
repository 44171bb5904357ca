"""Argument checks with the official client's outcome: a ``ValueError`` naming the argument.

The official ``pulsar`` package checks each argument of ``Client(...)``, ``create_producer``,
``subscribe``, ``create_reader`` and ``send`` before anything reaches the network, and a wrong
type raises ``ValueError`` ("Argument X is expected to be of type ..."). An application ported
from it may catch exactly that, so the option dataclasses run these checks when built, on the
asyncio and the blocking client alike.

Two deliberate widenings, both of values the official client refuses with ``ValueError``:
numbers where it wants ``int`` may be floats (timeouts such as ``0.5`` s; our own tests and
the asyncio client take them), and enums may be given as their ints.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_number", "check_type", "check_type_or_none"]


def _names(expected: type | tuple[type, ...]) -> str:
    if isinstance(expected, tuple):
        return "' or '".join(t.__name__ for t in expected)
    return expected.__name__


def check_type(expected: type | tuple[type, ...], value: Any, name: str) -> None:
    """Raises:
    ValueError: ``value`` is not an ``expected`` (the official message).
    """
    if not isinstance(value, expected):
        raise ValueError(
            f"Argument {name} is expected to be of type '{_names(expected)}' and not "
            f"'{type(value).__name__}'"
        )


def check_type_or_none(expected: type | tuple[type, ...], value: Any, name: str) -> None:
    """Raises:
    ValueError: ``value`` is neither None nor an ``expected``.
    """
    if value is not None and not isinstance(value, expected):
        raise ValueError(
            f"Argument {name} is expected to be either None or of type '{_names(expected)}'"
        )


def check_number(value: Any, name: str, *, optional: bool = False) -> None:
    """An int (or float) argument.

    Raises:
        ValueError: anything else.
    """
    if optional and value is None:
        return
    if not isinstance(value, (int, float)):
        raise ValueError(
            f"Argument {name} is expected to be of type 'int' and not '{type(value).__name__}'"
        )
