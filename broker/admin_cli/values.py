"""Option values in pulsar-admin's notation into what the admin API takes: amounts with units,
message ids, comma-separated lists. A value that does not parse is a usage error (exit 2)."""

from __future__ import annotations

import re

import click

__all__ = ["comma_list", "megabytes", "message_id", "minutes"]

_MINUTES_PER_UNIT = {"m": 1, "h": 60, "d": 24 * 60, "w": 7 * 24 * 60}
_MB_PER_UNIT = {"m": 1, "g": 1024, "t": 1024 * 1024}
# The broker keeps ledger and entry ids in signed 64 bits: the largest is past any message.
_LATEST = 2**63 - 1


def minutes(value: str) -> int:
    """``10m``/``3h``/``2d``/``1w`` in minutes; a bare number is minutes; -1 is no limit."""
    return _amount(value, _MINUTES_PER_UNIT, "time")


def megabytes(value: str) -> int:
    """``100M``/``5G``/``1T`` in MB; a bare number is MB; -1 is no limit."""
    return _amount(value, _MB_PER_UNIT, "size")


def _amount(value: str, units: dict[str, int], what: str) -> int:
    found = re.fullmatch(r"(-1|\d+)([a-zA-Z]?)", value.strip())
    if found is None or (found.group(1) == "-1" and found.group(2)):
        raise click.BadParameter(f"{value!r} is not a {what} (e.g. {', '.join(units)} or -1)")
    number, unit = int(found.group(1)), found.group(2).lower()
    if number == -1:
        return -1
    if unit and unit not in units:
        raise click.BadParameter(f"unknown unit {unit!r} in {value!r}: use one of {list(units)}")
    return number * units.get(unit, 1)


def message_id(value: str) -> dict[str, int]:
    """``ledger:entry`` (or ``ledger:entry:partition``), ``earliest`` or ``latest``."""
    if value == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    if value == "latest":
        return {"ledgerId": _LATEST, "entryId": _LATEST}
    parts = value.split(":")
    if len(parts) not in (2, 3) or not all(re.fullmatch(r"-?[0-9]+", p) for p in parts):
        raise click.BadParameter(f"{value!r} is not a message id (ledgerId:entryId)")
    found = {"ledgerId": int(parts[0]), "entryId": int(parts[1])}
    if len(parts) == 3:
        found["partitionIndex"] = int(parts[2])
    return found


def comma_list(text: str | None) -> list[str]:
    """``a, b,,c`` is ``["a", "b", "c"]``; nothing is ``[]``."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]
