"""pulsar-admin's notation for amounts, message ids and lists into what the admin API takes."""

from __future__ import annotations

import click
import pytest

from broker.admin_cli.values import comma_list, megabytes, message_id, minutes


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10m", 10), ("3h", 180), ("2d", 2880), ("1w", 10080), ("7", 7), ("-1", -1), (" 3H ", 180)],
)
def test_minutes(text: str, expected: int) -> None:
    assert minutes(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("100M", 100), ("2G", 2048), ("1t", 1048576)])
def test_megabytes(text: str, expected: int) -> None:
    assert megabytes(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [("9Q", "unknown unit 'q'"), ("-1h", "is not a size"), ("-2", "is not a size"), ("", "not")],
)
def test_an_amount_that_does_not_parse_is_a_usage_error(text: str, message: str) -> None:
    with pytest.raises(click.BadParameter, match=message):
        megabytes(text)


def test_message_ids() -> None:
    assert message_id("earliest") == {"ledgerId": -1, "entryId": -1}
    assert message_id("latest") == {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}
    assert message_id("12:3") == {"ledgerId": 12, "entryId": 3}
    assert message_id("12:3:1") == {"ledgerId": 12, "entryId": 3, "partitionIndex": 1}
    for bad in ("x:y", "12", "1:2:3:4", "1:"):
        with pytest.raises(click.BadParameter, match="is not a message id"):
            message_id(bad)


def test_comma_list() -> None:
    assert comma_list(" produce, consume,,") == ["produce", "consume"]
    assert comma_list(None) == []
