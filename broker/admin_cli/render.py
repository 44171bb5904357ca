"""What the broker answered, for a person (rich tables) or for a script (``--json``: the JSON as
it came, indented, keys sorted)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console
from rich.table import Table

__all__ = ["Output"]

_PUBLISHER_COLUMNS = ("producerName", "accessMode", "topicEpoch", "msgInCounter")
_SUBSCRIPTION_COLUMNS = ("subscription", "type", "msgBacklog", "unackedMessages", "consumers")
_LEDGER_COLUMNS = ("ledgerId", "entries", "size", "sealed at (ms)")
_CURSOR_COLUMNS = ("cursor", "markDeletePosition", "readPosition", "individuallyDeleted")


def _stderr_console() -> Console:
    return Console(stderr=True)


@dataclass
class Output:
    """This invocation's output mode, its output and its error stream."""

    as_json: bool = False
    out: Console = field(default_factory=Console)
    err: Console = field(default_factory=_stderr_console)

    def done(self, message: str) -> None:
        """A change went through: say so (nothing in --json mode, as pulsar-admin)."""
        if not self.as_json:
            self.out.print(message, highlight=False, markup=False)

    def error(self, message: str) -> None:
        self.err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)

    def show(self, value: Any, *, title: str | None = None) -> None:
        """A list as a one-column table headed ``title``, a mapping as fields titled ``title``."""
        if self.as_json:
            click.echo(json.dumps(value, indent=2, sort_keys=True))
        elif isinstance(value, list):
            self._table([title or "name"], ([str(item)] for item in value), show_edge=False)
        elif isinstance(value, dict):
            self._fields(value, title)
        else:
            self.out.print(str(value), highlight=False, markup=False)

    def show_stats(self, stats: dict[str, Any]) -> None:
        """Topic stats: the counters, then publishers and subscriptions as tables."""
        if self.as_json:
            self.show(stats)
            return
        self._fields({k: v for k, v in stats.items() if not isinstance(v, dict | list)}, "topic")
        publishers = stats.get("publishers", [])
        rows = ([str(p.get(column)) for column in _PUBLISHER_COLUMNS] for p in publishers)
        self._table(_PUBLISHER_COLUMNS, rows, title="publishers")
        subscriptions = stats.get("subscriptions", {}).items()
        rows = (_subscription_row(name, sub) for name, sub in subscriptions)
        self._table(_SUBSCRIPTION_COLUMNS, rows, title="subscriptions")

    def show_internal_stats(self, stats: dict[str, Any]) -> None:
        """Internal stats: the counters, then the ledgers and the cursors as tables."""
        if self.as_json:
            self.show(stats)
            return
        self._fields({k: v for k, v in stats.items() if k not in ("ledgers", "cursors")}, "topic")
        rows = (_ledger_row(ledger) for ledger in stats.get("ledgers", []))
        self._table(_LEDGER_COLUMNS, rows, title="ledgers")
        rows = (_cursor_row(name, cursor) for name, cursor in stats.get("cursors", {}).items())
        self._table(_CURSOR_COLUMNS, rows, title="cursors")

    def _fields(self, value: dict[str, Any], title: str | None) -> None:
        rows = ([key, _field_text(item)] for key, item in value.items())
        self._table(("field", "value"), rows, title=title, show_edge=False)

    def _table(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[str]],
        *,
        title: str | None = None,
        show_edge: bool = True,
    ) -> None:
        table = Table(*columns, title=title, show_edge=show_edge)
        for row in rows:
            table.add_row(*row)
        self.out.print(table)


def _field_text(value: Any) -> str:
    # Nested values as JSON: a person can still read them, a script can still parse them.
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _subscription_row(name: str, sub: dict[str, Any]) -> list[str]:
    counts = (sub.get("type"), sub.get("msgBacklog"), sub.get("unackedMessages"))
    return [name, *(str(count) for count in counts), str(len(sub.get("consumers", [])))]


def _ledger_row(ledger: dict[str, Any]) -> list[str]:
    sealed = str(ledger["timestamp"]) if ledger["timestamp"] else "(open)"
    return [str(ledger["ledgerId"]), str(ledger["entries"]), str(ledger["size"]), sealed]


def _cursor_row(name: str, cursor: dict[str, Any]) -> list[str]:
    positions = ("markDeletePosition", "readPosition", "individuallyDeletedMessages")
    return [name, *(str(cursor[key]) for key in positions)]
