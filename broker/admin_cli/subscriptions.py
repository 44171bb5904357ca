"""A topic's subscriptions: list, create, delete, clear the backlog, reset the cursor. The verbs
are ``topics``' (``magnetar-admin topics reset-cursor ...``), as in pulsar-admin."""

from __future__ import annotations

import time

import click

from broker.admin_cli.invocation import Admin, admin_verb, reading_verb
from broker.admin_cli.names import subscription_path, topic_name, topic_path
from broker.admin_cli.values import message_id as message_id_value
from broker.admin_cli.values import minutes

__all__ = ["VERBS"]

_subscription_option = click.option("-s", "--subscription", required=True)


topics_subscriptions = reading_verb(
    "subscriptions", "topic", lambda t: topic_path(t) + "/subscriptions", title="subscription"
)


@click.command("create-subscription")
@click.argument("topic")
@_subscription_option
@click.option(
    "-m",
    "--messageId",
    "message_id",
    default="latest",
    show_default=True,
    help="Where it starts: latest, earliest or ledgerId:entryId.",
)
@admin_verb
def topics_create_subscription(
    admin: Admin, topic: str, subscription: str, message_id: str
) -> None:
    done = f"Created subscription {subscription} on {topic_name(topic)}"
    path = subscription_path(topic, subscription)
    admin.change("PUT", path, message_id_value(message_id), done=done)


@click.command("unsubscribe")
@click.argument("topic")
@_subscription_option
@click.option("-f", "--force", is_flag=True, help="Disconnect its consumers first.")
@admin_verb
def topics_unsubscribe(admin: Admin, topic: str, subscription: str, force: bool) -> None:
    path = subscription_path(topic, subscription) + ("?force=true" if force else "")
    done = f"Deleted subscription {subscription} of {topic_name(topic)}"
    admin.change("DELETE", path, done=done)


@click.command("clear-backlog")
@click.argument("topic")
@_subscription_option
@admin_verb
def topics_clear_backlog(admin: Admin, topic: str, subscription: str) -> None:
    path = subscription_path(topic, subscription) + "/skip_all"
    done = f"Cleared the backlog of {subscription} on {topic_name(topic)}"
    admin.change("POST", path, done=done)


@click.command("reset-cursor")
@click.argument("topic")
@_subscription_option
@click.option("-t", "--time", "time_", help="Go back this far: 10m, 3h, 2d, 1w (minutes if bare).")
@click.option("-m", "--messageId", "message_id", help="Go to this message: ledgerId:entryId.")
@admin_verb
def topics_reset_cursor(
    admin: Admin, topic: str, subscription: str, time_: str | None, message_id: str | None
) -> None:
    if (time_ is None) == (message_id is None):
        raise click.UsageError("give exactly one of -t/--time and -m/--messageId")
    path = subscription_path(topic, subscription) + "/resetcursor"
    done = f"Reset {subscription} on {topic_name(topic)}"
    if time_ is not None:
        admin.change("POST", f"{path}/{_minutes_ago_ms(time_)}", done=done)
    else:
        assert message_id is not None
        admin.change("POST", path, message_id_value(message_id), done=done)


def _minutes_ago_ms(time_: str) -> int:
    """The publish time, in ms since the epoch, ``time_`` (10m, 3h, ...) before now."""
    back = minutes(time_)
    if back < 0:
        raise click.BadParameter("the time to go back must be >= 0", param_hint="--time")
    return int(time.time() * 1000) - back * 60_000


VERBS = (
    topics_subscriptions,
    topics_create_subscription,
    topics_unsubscribe,
    topics_clear_backlog,
    topics_reset_cursor,
)
