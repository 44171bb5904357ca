"""``TableView``: the blocking facade of ``AsyncTableView`` (``client.table_view``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from client.sync.runner import Runner
from client.table_view import AsyncTableView, Listener

__all__ = ["TableView"]

R = TypeVar("R")


class TableView:
    """Blocking facade of ``AsyncTableView`` (the official ``TableView`` names). Reads are
    snapshots of the map the event loop keeps current; listeners run on the loop thread."""

    def __init__(self, runner: Runner, view: AsyncTableView) -> None:
        self._runner = runner
        self._view = view

    def get(self, key: str, default: Any = None) -> Any:
        return self._runner.run(_call(lambda: self._view.get(key, default)))

    def items(self) -> list[tuple[str, Any]]:
        return self._runner.run(_call(lambda: list(self._view.items())))

    def snapshot(self) -> dict[str, Any]:
        return self._runner.run(_call(self._view.snapshot))

    def __len__(self) -> int:
        return self._runner.run(_call(lambda: len(self._view)))

    def __contains__(self, key: object) -> bool:
        return self._runner.run(_call(lambda: key in self._view))

    def for_each(self, action: Listener) -> None:
        self._runner.run(_call(lambda: self._view.for_each(action)))

    def for_each_and_listen(self, action: Listener) -> None:
        self._runner.run(_call(lambda: self._view.for_each_and_listen(action)))

    def listen(self, action: Listener) -> None:
        self._runner.run(_call(lambda: self._view.listen(action)))

    def close(self) -> None:
        self._runner.run(self._view.close())


async def _call(function: Callable[[], R]) -> R:
    """Run ``function`` on the loop thread (where the table view's map changes)."""
    return function()
