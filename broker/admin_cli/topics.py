"""``topics``: topics and partitioned topics, their lifecycle, compaction and stats; the
subscription verbs (``subscriptions``) belong to this group too, as in pulsar-admin."""

from __future__ import annotations

import click

from broker.admin_cli.invocation import Admin, admin_verb, reading_verb
from broker.admin_cli.names import namespace_path, topic_name, topic_path
from broker.admin_cli.subscriptions import VERBS as SUBSCRIPTION_VERBS

__all__ = ["topics"]


@click.group()
def topics() -> None:
    """Topics, partitioned topics and subscriptions."""


for _verb in SUBSCRIPTION_VERBS:
    topics.add_command(_verb)


def _listing(name: str, suffix: str, title: str) -> None:
    """``name NAMESPACE``: the namespace's topics of one kind."""

    def path(namespace: str) -> str:
        return f"/admin/v2/persistent/{namespace_path(namespace)}{suffix}"

    topics.add_command(reading_verb(name, "namespace", path, title=title))


def _reading(name: str, suffix: str, doc: str | None = None) -> None:
    """``name TOPIC``: GET the topic's ``suffix`` and show it."""
    topics.add_command(reading_verb(name, "topic", lambda t: topic_path(t) + suffix, help_text=doc))


def _changing(name: str, method: str, suffix: str, done: str, doc: str | None = None) -> None:
    """``name TOPIC``: ``method`` on the topic's ``suffix``, then say ``done`` ({topic}: its
    full name)."""

    @topics.command(name, help=doc)
    @click.argument("topic")
    @admin_verb
    def change(admin: Admin, topic: str) -> None:
        done_text = done.format(topic=topic_name(topic))
        admin.change(method, topic_path(topic) + suffix, done=done_text)


_listing("list", "", "topic")
_listing("list-partitioned-topics", "/partitioned", "partitioned topic")
_changing("create", "PUT", "", "Created topic {topic}")
_changing("delete", "DELETE", "", "Deleted topic {topic}")
_changing("unload", "PUT", "/unload", "Unloaded {topic}")


@topics.command("terminate")
@click.argument("topic")
@admin_verb
def topics_terminate(admin: Admin, topic: str) -> None:
    """Accept no more messages; print the last message's id."""
    last = admin.request("POST", topic_path(topic) + "/terminate")
    if admin.as_json:
        admin.output.show(last)
    else:
        admin.output.done(f"Topic terminated; last message: {last['ledgerId']}:{last['entryId']}")


# ---------------------------------------------------------------------------- partitioned


def _partitioning(name: str, method: str, option_help: str, done: str) -> None:
    """``name TOPIC -p N``: create or grow a partitioned topic, then say ``done`` ({topic},
    {partitions})."""

    @topics.command(name)
    @click.argument("topic")
    @click.option("-p", "--partitions", type=int, required=True, help=option_help)
    @admin_verb
    def partition(admin: Admin, topic: str, partitions: int) -> None:
        done_text = done.format(topic=topic_name(topic), partitions=partitions)
        admin.change(method, topic_path(topic) + "/partitions", partitions, done=done_text)


_partitioning(
    "create-partitioned-topic",
    "PUT",
    "Number of partitions.",
    "Created partitioned topic {topic} with {partitions} partitions",
)
_partitioning(
    "update-partitioned-topic",
    "POST",
    "New number of partitions.",
    "Updated {topic} to {partitions} partitions",
)
_reading("get-partitioned-topic-metadata", "/partitions")
_changing("delete-partitioned-topic", "DELETE", "/partitions", "Deleted partitioned topic {topic}")


# ---------------------------------------------------------------------------- compaction

_changing(
    "compact",
    "PUT",
    "/compaction",
    "Compaction of {topic} started",
    "Start a compaction (the latest message per key survives).",
)
_reading("compaction-status", "/compaction", "NOT_RUN, RUNNING, SUCCESS or ERROR (with the error).")


# ---------------------------------------------------------------------------- stats


@topics.command("stats")
@click.argument("topic")
@admin_verb
def topics_stats(admin: Admin, topic: str) -> None:
    admin.output.show_stats(admin.request("GET", topic_path(topic) + "/stats"))


@topics.command("partitioned-stats")
@click.argument("topic")
@click.option("--per-partition", is_flag=True, help="Include each partition's stats.")
@admin_verb
def topics_partitioned_stats(admin: Admin, topic: str, per_partition: bool) -> None:
    query = f"?perPartition={'true' if per_partition else 'false'}"
    admin.output.show_stats(admin.request("GET", topic_path(topic) + "/partitioned-stats" + query))


@topics.command("stats-internal")
@click.argument("topic")
@admin_verb
def topics_stats_internal(admin: Admin, topic: str) -> None:
    admin.output.show_internal_stats(admin.request("GET", topic_path(topic) + "/internalStats"))
