"""``namespaces``: create and delete, permissions, bundles and their unloading, and the
policies (deduplication, retention, message TTL, auto topic creation, schema policies)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import click

from broker.admin_cli.invocation import Admin, admin_verb, reading_verb
from broker.admin_cli.names import namespace_path, segment
from broker.admin_cli.values import comma_list, megabytes, minutes

__all__ = ["namespaces"]


@click.group()
def namespaces() -> None:
    """Namespaces and their policies."""


def _path(namespace: str, suffix: str = "") -> str:
    return f"/admin/v2/namespaces/{namespace_path(namespace)}{suffix}"


def _tenant_path(tenant: str) -> str:
    return f"/admin/v2/namespaces/{segment(tenant)}"


def _reading(name: str, suffix: str, title: str | None = None, doc: str | None = None) -> None:
    """``name NAMESPACE``: GET the namespace's ``suffix`` and show it."""
    verb = reading_verb(name, "namespace", lambda ns: _path(ns, suffix), title=title, help_text=doc)
    namespaces.add_command(verb)


namespaces.add_command(reading_verb("list", "tenant", _tenant_path, title="namespace"))


@namespaces.command("create")
@click.argument("namespace")
@admin_verb
def namespaces_create(admin: Admin, namespace: str) -> None:
    admin.change("PUT", _path(namespace), done=f"Created namespace {namespace}")


@namespaces.command("delete")
@click.argument("namespace")
@click.option("-f", "--force", is_flag=True, help="Delete the namespace's topics too.")
@admin_verb
def namespaces_delete(admin: Admin, namespace: str, force: bool) -> None:
    path = _path(namespace, "?force=true" if force else "")
    admin.change("DELETE", path, done=f"Deleted namespace {namespace}")


_reading("policies", "")
_reading("topics", "/topics", "topic")


# ---------------------------------------------------------------------------- permissions

_reading("permissions", "/permissions", "role", "The roles granted actions on NAMESPACE.")


@namespaces.command("grant-permission")
@click.argument("namespace")
@click.option("--role", required=True, help="The role to grant to.")
@click.option("--actions", required=True, help="Comma-separated: produce, consume, functions, ...")
@admin_verb
def namespaces_grant_permission(admin: Admin, namespace: str, role: str, actions: str) -> None:
    chosen = comma_list(actions)
    path = _path(namespace, f"/permissions/{segment(role)}")
    admin.change("POST", path, chosen, done=f"Granted {', '.join(chosen)} on {namespace} to {role}")


@namespaces.command("revoke-permission")
@click.argument("namespace")
@click.option("--role", required=True, help="The role to revoke.")
@admin_verb
def namespaces_revoke_permission(admin: Admin, namespace: str, role: str) -> None:
    path = _path(namespace, f"/permissions/{segment(role)}")
    admin.change("DELETE", path, done=f"Revoked the permissions of {role} on {namespace}")


# ---------------------------------------------------------------------------- bundles

_reading(
    "bundles",
    "/bundles",
    doc="The namespace's bundles (hash ranges of topic names; Pulsar's BundlesData).",
)


@namespaces.command("unload")
@click.argument("namespace")
@click.option("--bundle", "-b", help="One bundle, e.g. 0x00000000_0x40000000 (default: all).")
@click.option(
    "--destinationBroker", "-d", "destination", help="host:port of the broker to move it to."
)
@admin_verb
def namespaces_unload(
    admin: Admin, namespace: str, bundle: str | None, destination: str | None
) -> None:
    """Unload bundles: their owner closes their topics; the next lookup places them again."""
    bundles = [bundle] if bundle is not None else _all_bundles(admin, namespace)
    query = f"?destinationBroker={segment(destination)}" if destination else ""
    for name in bundles:
        admin.request("PUT", _path(namespace, f"/{segment(name)}/unload{query}"))
    admin.output.done(f"Unloaded {len(bundles)} bundle(s) of {namespace}")


def _all_bundles(admin: Admin, namespace: str) -> list[str]:
    """The bundles' names (``low_high``) from the namespace's boundaries."""
    boundaries = admin.request("GET", _path(namespace, "/bundles"))["boundaries"]
    return [f"{low}_{high}" for low, high in itertools.pairwise(boundaries)]


# ---------------------------------------------------------------------------- policies

_reading("get-deduplication", "/deduplication")
_reading("get-retention", "/retention")
_reading("get-message-ttl", "/messageTTL")


@namespaces.command("set-retention")
@click.argument("namespace")
@click.option("-t", "--time", "time_", required=True, help="Retention time: 10m, 3h, 2d, 1w, -1.")
@click.option("-s", "--size", required=True, help="Retention size: 100M, 10G, -1.")
@admin_verb
def namespaces_set_retention(admin: Admin, namespace: str, time_: str, size: str) -> None:
    policy = {"retentionTimeInMinutes": minutes(time_), "retentionSizeInMB": megabytes(size)}
    done = f"Retention of {namespace} set to {time_} / {size}"
    admin.change("POST", _path(namespace, "/retention"), policy, done=done)


@namespaces.command("set-message-ttl")
@click.argument("namespace")
@click.option("-ttl", "--messageTTL", "ttl", type=int, required=True, help="TTL in seconds.")
@admin_verb
def namespaces_set_ttl(admin: Admin, namespace: str, ttl: int) -> None:
    done = f"Message TTL of {namespace} set to {ttl} s"
    admin.change("POST", _path(namespace, "/messageTTL"), ttl, done=done)


def _switch(
    name: str, suffix: str, body: Callable[[bool], Any], what: str, doc: str | None
) -> None:
    """``name NAMESPACE --enable|--disable``: POST ``body(enabled)`` to the namespace's
    ``suffix``."""

    @namespaces.command(name)
    @click.argument("namespace")
    @click.option("--enable/--disable", "-e/-d", required=True, help=doc)
    @admin_verb
    def switch(admin: Admin, namespace: str, enable: bool) -> None:
        done = f"{what} {'enabled' if enable else 'disabled'} on {namespace}"
        admin.change("POST", _path(namespace, suffix), body(enable), done=done)


# Deduplication's body is the bare boolean.
_switch("set-deduplication", "/deduplication", bool, "Deduplication", "Turn PIP-6 dedup on or off.")
_switch(
    "set-auto-topic-creation",
    "/autoTopicCreation",
    lambda on: {"allowAutoTopicCreation": on, "topicType": "non-partitioned"},
    "Auto topic creation",
    None,
)


# ---------------------------------------------------------------------------- schema policies

_reading("get-schema-compatibility-strategy", "/schemaCompatibilityStrategy")
_reading("get-is-allow-auto-update-schema", "/isAllowAutoUpdateSchema")
_reading("get-schema-validation-enforce", "/schemaValidationEnforced")

_STRATEGIES = (
    "UNDEFINED",
    "ALWAYS_INCOMPATIBLE",
    "ALWAYS_COMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)


@namespaces.command("set-schema-compatibility-strategy")
@click.argument("namespace")
@click.option(
    "-c",
    "--compatibility",
    required=True,
    type=click.Choice(_STRATEGIES, case_sensitive=False),
    help="How a new schema must relate to a topic's versions (UNDEFINED: the broker's).",
)
@admin_verb
def namespaces_set_schema_compatibility_strategy(
    admin: Admin, namespace: str, compatibility: str
) -> None:
    strategy = compatibility.upper()
    done = f"Schema compatibility strategy of {namespace} set to {strategy}"
    admin.change("PUT", _path(namespace, "/schemaCompatibilityStrategy"), strategy, done=done)


_switch(
    "set-is-allow-auto-update-schema",
    "/isAllowAutoUpdateSchema",
    bool,
    "Schema auto update",
    "Whether producers may add compatible schema versions.",
)
_switch(
    "set-schema-validation-enforce",
    "/schemaValidationEnforced",
    bool,
    "Schema validation",
    "Refuse producers without a schema on topics that have one.",
)
