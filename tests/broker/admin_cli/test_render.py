"""What magnetar-admin prints: tables for a person, the broker's JSON for a script."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from broker.admin_cli.render import Output

STATS = {
    "msgInCounter": 4,
    "publishers": [{"producerName": "writer", "accessMode": "Shared", "topicEpoch": 0}],
    "subscriptions": {"sub": {"type": "Exclusive", "msgBacklog": 3, "consumers": [{}, {}]}},
}


def printed(as_json: bool = False) -> tuple[Output, io.StringIO]:
    text = io.StringIO()
    return Output(as_json, out=Console(file=text, width=200), err=Console(file=text)), text


def test_lists_and_mappings_are_tables() -> None:
    output, text = printed()
    output.show(["acme", "public"], title="tenant")
    output.show({"retention": {"size": 1}, "ttl": 60}, title="policies")
    shown = text.getvalue()
    assert "tenant" in shown
    assert "acme" in shown
    assert "policies" in shown
    assert '{"size": 1}' in shown  # nested values stay JSON
    assert "60" in shown


def test_json_mode_prints_the_answer_sorted_and_says_nothing_of_changes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    output, text = printed(as_json=True)
    output.done("Created tenant acme")
    output.show({"b": 1, "a": [2]})
    assert text.getvalue() == ""
    assert capsys.readouterr().out == json.dumps({"a": [2], "b": 1}, indent=2) + "\n"


def test_stats_show_counters_publishers_and_subscriptions() -> None:
    output, text = printed()
    output.show_stats(STATS)
    shown = text.getvalue()
    assert "msgInCounter" in shown
    assert "writer" in shown
    assert "Shared" in shown
    row = next(line for line in shown.splitlines() if line.startswith("│ sub "))
    cells = [cell.strip() for cell in row.split("│")]
    assert cells == ["", "sub", "Exclusive", "3", "None", "2", ""]  # 2: the consumers, counted


def test_internal_stats_show_ledgers_and_cursors() -> None:
    output, text = printed()
    ledgers = [{"ledgerId": 7, "entries": 2, "size": 10, "timestamp": 0}]
    cursors = {
        "sub": {
            "markDeletePosition": "7:0",
            "readPosition": "7:1",
            "individuallyDeletedMessages": "[]",
        }
    }
    output.show_internal_stats({"numberOfEntries": 2, "ledgers": ledgers, "cursors": cursors})
    shown = text.getvalue()
    assert "(open)" in shown  # a ledger without a timestamp is still being written
    assert "7:1" in shown
    assert "numberOfEntries" in shown


def test_done_and_error() -> None:
    output, text = printed()
    output.done("Created tenant [acme]")  # no markup: brackets stay
    output.error("GET /x failed: HTTP 404: Not Found")
    assert text.getvalue() == "Created tenant [acme]\nerror: GET /x failed: HTTP 404: Not Found\n"
