"""Names from the command line into the admin API's paths."""

from __future__ import annotations

import click
import pytest

from broker.admin_cli.names import (
    namespace_path,
    segment,
    subscription_path,
    topic_name,
    topic_path,
)


def test_topic_paths_take_pulsars_short_and_full_names() -> None:
    assert topic_path("orders") == "/admin/v2/persistent/public/default/orders"
    assert topic_path("persistent://acme/ns/orders") == "/admin/v2/persistent/acme/ns/orders"
    assert topic_name("acme/ns/orders") == "persistent://acme/ns/orders"
    assert subscription_path("orders", "a/b c") == (
        "/admin/v2/persistent/public/default/orders/subscription/a%2Fb%20c"
    )


def test_each_part_is_one_segment() -> None:
    assert segment("0x00000000_0x40000000") == "0x00000000_0x40000000"
    assert segment("127.0.0.1:8080") == "127.0.0.1%3A8080"
    assert namespace_path("acme/orders") == "acme/orders"


@pytest.mark.parametrize("bad", ["persistent://public/default/..", "a/b/c/d/e"])
def test_a_topic_the_broker_cannot_parse_is_a_usage_error(bad: str) -> None:
    with pytest.raises(click.BadParameter):
        topic_path(bad)


def test_a_namespace_without_its_tenant_is_a_usage_error() -> None:
    with pytest.raises(click.BadParameter):
        namespace_path("orders")
