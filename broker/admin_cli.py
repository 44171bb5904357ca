"""``magnetar-admin``: the admin REST API from a shell, with ``pulsar-admin``'s verbs.

    magnetar-admin [--admin-url URL] [--json] clusters|tenants|namespaces|topics <verb> ...

Output is a readable table (rich) by default; ``--json`` (before or after the verb) prints the
broker's JSON as it came, for scripts. Exit codes: 0 done; 1 the broker refused the request
(the message gives the HTTP status and Pulsar's ``reason``); 2 bad usage (click's code); 3 the
broker could not be reached. The HTTP side is the standard library's ``urllib``: one blocking
request per command needs nothing more.
"""

from __future__ import annotations

import itertools
import json
import re
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote

import click
from rich.console import Console
from rich.table import Table

from broker.auth.admin_client import AdminAuthError, authorization_header, tls_context
from protocol.topic_name import InvalidTopicNameError, NamespaceName, TopicName

DEFAULT_ADMIN_URL = "http://localhost:8080"
EXIT_REFUSED = 1
EXIT_UNREACHABLE = 3
_TIMEOUT_S = 30.0
_MAX_REDIRECTS = 5

F = TypeVar("F", bound=Callable[..., Any])


class _KeepRedirects(urllib.request.HTTPRedirectHandler):
    """Hands every redirect back as an ``HTTPError``: ``Admin.request`` follows it itself."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Admin:
    """The connection settings and output mode of one invocation."""

    url: str
    as_json: bool
    out: Console
    err: Console
    authorization: str | None = None  # the Authorization header (--auth-token, --auth-params)
    ssl_context: ssl.SSLContext | None = None  # for https:// admin URLs

    # ------------------------------------------------------------------ HTTP

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Any:
        """One request; the decoded JSON answer (None for an empty one). Exits on failure.

        A 307/308 (cluster mode: the topic's or bundle's owner answers) is followed with the
        same method and body, as pulsar-admin does; urllib alone follows it for GET only.
        """
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.authorization is not None:
            headers["Authorization"] = self.authorization
        url = self.url.rstrip("/") + path
        for _hop in range(_MAX_REDIRECTS + 1):
            request = urllib.request.Request(url, method=method, data=data, headers=headers)
            try:
                with self._opener().open(request, timeout=_TIMEOUT_S) as reply:
                    text = reply.read()
                break
            except urllib.error.HTTPError as error:
                location = error.headers.get("Location")
                if error.code in (307, 308) and location:
                    url = urllib.parse.urljoin(url, location)
                    continue
                self.fail(
                    f"{method} {path} failed: HTTP {error.code}: {_reason(error)}", EXIT_REFUSED
                )
            except (urllib.error.URLError, OSError) as error:
                reason = getattr(error, "reason", error)
                self.fail(f"cannot reach the broker at {url}: {reason}", EXIT_UNREACHABLE)
        else:
            self.fail(f"{method} {path}: more than {_MAX_REDIRECTS} redirects", EXIT_REFUSED)
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text.decode(errors="replace")

    def _opener(self) -> urllib.request.OpenerDirector:
        handlers: list[urllib.request.BaseHandler] = [_KeepRedirects()]
        if self.ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self.ssl_context))
        return urllib.request.build_opener(*handlers)

    def fail(self, message: str, code: int) -> NoReturn:
        self.err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
        sys.exit(code)

    # ------------------------------------------------------------------ output

    def done(self, message: str) -> None:
        """A change went through: say so (nothing in --json mode, as pulsar-admin)."""
        if not self.as_json:
            self.out.print(message, highlight=False, markup=False)

    def show(self, value: Any, *, title: str | None = None) -> None:
        if self.as_json:
            click.echo(json.dumps(value, indent=2, sort_keys=True))
        elif isinstance(value, list):
            self._list(value, title or "name")
        elif isinstance(value, dict):
            self._mapping(value, title)
        else:
            self.out.print(str(value), highlight=False, markup=False)

    def _list(self, values: list[Any], header: str) -> None:
        table = Table(header, show_edge=False)
        for value in values:
            table.add_row(str(value))
        self.out.print(table)

    def _mapping(self, value: dict[str, Any], title: str | None) -> None:
        table = Table("field", "value", title=title, show_edge=False)
        for key, item in value.items():
            shown = json.dumps(item) if isinstance(item, dict | list) else str(item)
            table.add_row(key, shown)
        self.out.print(table)

    def show_stats(self, stats: dict[str, Any]) -> None:
        """Topic stats: the counters, then publishers and subscriptions as tables."""
        if self.as_json:
            self.show(stats)
            return
        scalars = {k: v for k, v in stats.items() if not isinstance(v, dict | list)}
        self._mapping(scalars, "topic")
        publishers = Table(
            "producerName", "accessMode", "topicEpoch", "msgInCounter", title="publishers"
        )
        for producer in stats.get("publishers", []):
            fields = ("producerName", "accessMode", "topicEpoch", "msgInCounter")
            publishers.add_row(*(str(producer.get(k)) for k in fields))
        self.out.print(publishers)
        subscriptions = Table(
            "subscription",
            "type",
            "msgBacklog",
            "unackedMessages",
            "consumers",
            title="subscriptions",
        )
        for name, sub in stats.get("subscriptions", {}).items():
            subscriptions.add_row(
                name,
                str(sub.get("type")),
                str(sub.get("msgBacklog")),
                str(sub.get("unackedMessages")),
                str(len(sub.get("consumers", []))),
            )
        self.out.print(subscriptions)


def _reason(error: urllib.error.HTTPError) -> str:
    body = error.read()
    try:
        reason = json.loads(body).get("reason")
    except (ValueError, AttributeError):
        reason = None
    return str(reason) if reason else (body.decode(errors="replace").strip() or str(error.reason))


# ---------------------------------------------------------------------------- arguments


def _admin(ctx: click.Context) -> Admin:
    admin: Admin = ctx.find_object(Admin)  # type: ignore[assignment]
    return admin


def json_option(command: F) -> F:
    """``--json`` after the verb too (``magnetar-admin topics list public/default --json``)."""

    def enable(ctx: click.Context, _: click.Parameter, value: bool) -> None:
        if value:
            _admin(ctx).as_json = True

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=False,
        callback=enable,
        help="Print the broker's JSON instead of a table.",
    )(command)


def _topic(value: str) -> TopicName:
    try:
        return TopicName.parse(value)
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc)) from exc


def _topic_path(value: str) -> str:
    name = _topic(value)
    parts = (name.tenant, name.namespace, name.local_name)
    return "/admin/v2/persistent/" + "/".join(quote(p, safe="") for p in parts)


def _namespace_path(value: str) -> str:
    try:
        namespace = NamespaceName.parse(value)
    except InvalidTopicNameError as exc:
        raise click.BadParameter(str(exc)) from exc
    return f"{quote(namespace.tenant, safe='')}/{quote(namespace.namespace, safe='')}"


_UNITS_MINUTES = {"m": 1, "h": 60, "d": 24 * 60, "w": 7 * 24 * 60}
_UNITS_MB = {"m": 1, "g": 1024, "t": 1024 * 1024}


def _amount(value: str, units: dict[str, int], what: str) -> int:
    """pulsar-admin's ``10m``/``3h``/``2d``/``1w`` (minutes) or ``100M``/``5G`` (MB); -1 = no
    limit; a bare number is minutes / MB."""
    found = re.fullmatch(r"(-1|\d+)([a-zA-Z]?)", value.strip())
    if found is None or (found.group(1) == "-1" and found.group(2)):
        raise click.BadParameter(f"{value!r} is not a {what} (e.g. {', '.join(units)} or -1)")
    number, unit = int(found.group(1)), found.group(2).lower()
    if number == -1:
        return -1
    if unit and unit not in units:
        raise click.BadParameter(f"unknown unit {unit!r} in {value!r}: use one of {list(units)}")
    return number * units.get(unit, 1)


def _message_id(value: str) -> dict[str, int]:
    """``ledger:entry`` (or ``ledger:entry:partition``), ``earliest`` or ``latest``."""
    if value == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    if value == "latest":
        return {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}
    parts = value.split(":")
    if len(parts) not in (2, 3) or not all(re.fullmatch(r"-?[0-9]+", p) for p in parts):
        raise click.BadParameter(f"{value!r} is not a message id (ledgerId:entryId)")
    message_id = {"ledgerId": int(parts[0]), "entryId": int(parts[1])}
    if len(parts) == 3:
        message_id["partitionIndex"] = int(parts[2])
    return message_id


# ---------------------------------------------------------------------------- root


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--admin-url",
    default=DEFAULT_ADMIN_URL,
    show_default=True,
    envvar="MAGNETAR_ADMIN_URL",
    help="The broker's web service URL.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the broker's JSON, for scripts.")
@click.option("--auth-token", envvar="MAGNETAR_AUTH_TOKEN", help="A token (Bearer).")
@click.option("--auth-plugin", help="token or basic (or the Java client's class names).")
@click.option("--auth-params", help='token:<jwt>, file:///path, or {"userId":..,"password":..}.')
@click.option("--tls-trust-cert-path", help="CA file for an https:// admin URL.")
@click.option("--tls-allow-insecure", is_flag=True, help="Do not check the broker's certificate.")
@click.option("--tls-cert-file", help="Client certificate (TLS authentication).")
@click.option("--tls-key-file", help="Its private key.")
@click.pass_context
def main(
    ctx: click.Context,
    admin_url: str,
    as_json: bool,
    auth_token: str | None,
    auth_plugin: str | None,
    auth_params: str | None,
    tls_trust_cert_path: str | None,
    tls_allow_insecure: bool,
    tls_cert_file: str | None,
    tls_key_file: str | None,
) -> None:
    """Administer a Magnetar broker (pulsar-admin's verbs over the /admin/v2 REST API)."""
    try:
        authorization = authorization_header(auth_plugin, auth_params, auth_token)
    except AdminAuthError as exc:
        raise click.UsageError(str(exc)) from None
    context = None
    if admin_url.startswith("https://"):
        context = tls_context(tls_trust_cert_path, tls_allow_insecure, tls_cert_file, tls_key_file)
    ctx.obj = Admin(admin_url, as_json, Console(), Console(stderr=True), authorization, context)


pass_admin = click.make_pass_decorator(Admin)


# ---------------------------------------------------------------------------- clusters


@main.group()
def clusters() -> None:
    """The cluster (one: standalone)."""


@clusters.command("list")
@json_option
@pass_admin
def clusters_list(admin: Admin) -> None:
    admin.show(admin.request("GET", "/admin/v2/clusters"), title="cluster")


@clusters.command("get")
@click.argument("cluster")
@json_option
@pass_admin
def clusters_get(admin: Admin, cluster: str) -> None:
    admin.show(admin.request("GET", f"/admin/v2/clusters/{quote(cluster, safe='')}"))


# ---------------------------------------------------------------------------- brokers


@main.group()
def brokers() -> None:
    """The live brokers (cluster mode: registered in etcd)."""


@brokers.command("list")
@click.argument("cluster", default="standalone")
@json_option
@pass_admin
def brokers_list(admin: Admin, cluster: str) -> None:
    admin.show(admin.request("GET", f"/admin/v2/brokers/{quote(cluster, safe='')}"), title="broker")


# ---------------------------------------------------------------------------- tenants


@main.group()
def tenants() -> None:
    """Tenants."""


@tenants.command("list")
@json_option
@pass_admin
def tenants_list(admin: Admin) -> None:
    admin.show(admin.request("GET", "/admin/v2/tenants"), title="tenant")


@tenants.command("get")
@click.argument("tenant")
@json_option
@pass_admin
def tenants_get(admin: Admin, tenant: str) -> None:
    admin.show(admin.request("GET", f"/admin/v2/tenants/{quote(tenant, safe='')}"))


def _tenant_info(admin_roles: str | None, allowed_clusters: str | None) -> dict[str, Any] | None:
    if admin_roles is None and allowed_clusters is None:
        return None
    return {"adminRoles": _split(admin_roles), "allowedClusters": _split(allowed_clusters)}


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


@tenants.command("create")
@click.argument("tenant")
@click.option("-r", "--admin-roles", help="Comma-separated roles that administer the tenant.")
@click.option("-c", "--allowed-clusters", help="Comma-separated clusters.")
@json_option
@pass_admin
def tenants_create(
    admin: Admin, tenant: str, admin_roles: str | None, allowed_clusters: str | None
) -> None:
    body = _tenant_info(admin_roles, allowed_clusters)
    admin.request("PUT", f"/admin/v2/tenants/{quote(tenant, safe='')}", body)
    admin.done(f"Created tenant {tenant}")


@tenants.command("update")
@click.argument("tenant")
@click.option("-r", "--admin-roles", help="Comma-separated roles that administer the tenant.")
@click.option("-c", "--allowed-clusters", help="Comma-separated clusters.")
@json_option
@pass_admin
def tenants_update(
    admin: Admin, tenant: str, admin_roles: str | None, allowed_clusters: str | None
) -> None:
    body = _tenant_info(admin_roles, allowed_clusters) or {}
    admin.request("POST", f"/admin/v2/tenants/{quote(tenant, safe='')}", body)
    admin.done(f"Updated tenant {tenant}")


@tenants.command("delete")
@click.argument("tenant")
@json_option
@pass_admin
def tenants_delete(admin: Admin, tenant: str) -> None:
    admin.request("DELETE", f"/admin/v2/tenants/{quote(tenant, safe='')}")
    admin.done(f"Deleted tenant {tenant}")


# ---------------------------------------------------------------------------- namespaces


@main.group()
def namespaces() -> None:
    """Namespaces and their policies."""


@namespaces.command("list")
@click.argument("tenant")
@json_option
@pass_admin
def namespaces_list(admin: Admin, tenant: str) -> None:
    admin.show(
        admin.request("GET", f"/admin/v2/namespaces/{quote(tenant, safe='')}"), title="namespace"
    )


@namespaces.command("create")
@click.argument("namespace")
@json_option
@pass_admin
def namespaces_create(admin: Admin, namespace: str) -> None:
    admin.request("PUT", f"/admin/v2/namespaces/{_namespace_path(namespace)}")
    admin.done(f"Created namespace {namespace}")


@namespaces.command("delete")
@click.argument("namespace")
@click.option("-f", "--force", is_flag=True, help="Delete the namespace's topics too.")
@json_option
@pass_admin
def namespaces_delete(admin: Admin, namespace: str, force: bool) -> None:
    suffix = "?force=true" if force else ""
    admin.request("DELETE", f"/admin/v2/namespaces/{_namespace_path(namespace)}{suffix}")
    admin.done(f"Deleted namespace {namespace}")


@namespaces.command("permissions")
@click.argument("namespace")
@json_option
@pass_admin
def namespaces_permissions(admin: Admin, namespace: str) -> None:
    """The roles granted actions on NAMESPACE."""
    admin.show(
        admin.request("GET", f"/admin/v2/namespaces/{_namespace_path(namespace)}/permissions"),
        title="role",
    )


@namespaces.command("grant-permission")
@click.argument("namespace")
@click.option("--role", required=True, help="The role to grant to.")
@click.option("--actions", required=True, help="Comma-separated: produce, consume, functions, ...")
@json_option
@pass_admin
def namespaces_grant_permission(admin: Admin, namespace: str, role: str, actions: str) -> None:
    chosen = [a.strip() for a in actions.split(",") if a.strip()]
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/permissions/{quote(role, safe='')}"
    admin.request("POST", path, chosen)
    admin.done(f"Granted {', '.join(chosen)} on {namespace} to {role}")


@namespaces.command("revoke-permission")
@click.argument("namespace")
@click.option("--role", required=True, help="The role to revoke.")
@json_option
@pass_admin
def namespaces_revoke_permission(admin: Admin, namespace: str, role: str) -> None:
    admin.request(
        "DELETE",
        f"/admin/v2/namespaces/{_namespace_path(namespace)}/permissions/{quote(role, safe='')}",
    )
    admin.done(f"Revoked the permissions of {role} on {namespace}")


@namespaces.command("policies")
@click.argument("namespace")
@json_option
@pass_admin
def namespaces_policies(admin: Admin, namespace: str) -> None:
    admin.show(admin.request("GET", f"/admin/v2/namespaces/{_namespace_path(namespace)}"))


@namespaces.command("topics")
@click.argument("namespace")
@json_option
@pass_admin
def namespaces_topics(admin: Admin, namespace: str) -> None:
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/topics"
    admin.show(admin.request("GET", path), title="topic")


@namespaces.command("bundles")
@click.argument("namespace")
@json_option
@pass_admin
def namespaces_bundles(admin: Admin, namespace: str) -> None:
    """The namespace's bundles (hash ranges of topic names; Pulsar's BundlesData)."""
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/bundles"
    admin.show(admin.request("GET", path))


@namespaces.command("unload")
@click.argument("namespace")
@click.option("--bundle", "-b", help="One bundle, e.g. 0x00000000_0x40000000 (default: all).")
@click.option(
    "--destinationBroker", "-d", "destination", help="host:port of the broker to move it to."
)
@json_option
@pass_admin
def namespaces_unload(
    admin: Admin, namespace: str, bundle: str | None, destination: str | None
) -> None:
    """Unload bundles: their owner closes their topics; the next lookup places them again."""
    base = f"/admin/v2/namespaces/{_namespace_path(namespace)}"
    if bundle is None:
        boundaries = admin.request("GET", base + "/bundles")["boundaries"]
        bundles = [f"{low}_{high}" for low, high in itertools.pairwise(boundaries)]
    else:
        bundles = [bundle]
    query = f"?destinationBroker={quote(destination, safe='')}" if destination else ""
    for name in bundles:
        admin.request("PUT", f"{base}/{quote(name, safe='')}/unload{query}")
    admin.done(f"Unloaded {len(bundles)} bundle(s) of {namespace}")


@namespaces.command("set-deduplication")
@click.argument("namespace")
@click.option("--enable/--disable", "-e/-d", required=True, help="Turn PIP-6 dedup on or off.")
@json_option
@pass_admin
def namespaces_set_dedup(admin: Admin, namespace: str, enable: bool) -> None:
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/deduplication"
    admin.request("POST", path, raw=b"true" if enable else b"false")
    admin.done(f"Deduplication {'enabled' if enable else 'disabled'} on {namespace}")


@namespaces.command("get-deduplication")
@click.argument("namespace")
@json_option
@pass_admin
def namespaces_get_dedup(admin: Admin, namespace: str) -> None:
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/deduplication"
    admin.show(admin.request("GET", path))


@namespaces.command("set-retention")
@click.argument("namespace")
@click.option("-t", "--time", "time_", required=True, help="Retention time: 10m, 3h, 2d, 1w, -1.")
@click.option("-s", "--size", required=True, help="Retention size: 100M, 10G, -1.")
@json_option
@pass_admin
def namespaces_set_retention(admin: Admin, namespace: str, time_: str, size: str) -> None:
    policy = {
        "retentionTimeInMinutes": _amount(time_, _UNITS_MINUTES, "time"),
        "retentionSizeInMB": _amount(size, _UNITS_MB, "size"),
    }
    admin.request("POST", f"/admin/v2/namespaces/{_namespace_path(namespace)}/retention", policy)
    admin.done(f"Retention of {namespace} set to {time_} / {size}")


@namespaces.command("get-retention")
@click.argument("namespace")
@json_option
@pass_admin
def namespaces_get_retention(admin: Admin, namespace: str) -> None:
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/retention"
    admin.show(admin.request("GET", path))


@namespaces.command("set-message-ttl")
@click.argument("namespace")
@click.option("-ttl", "--messageTTL", "ttl", type=int, required=True, help="TTL in seconds.")
@json_option
@pass_admin
def namespaces_set_ttl(admin: Admin, namespace: str, ttl: int) -> None:
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/messageTTL"
    admin.request("POST", path, ttl)
    admin.done(f"Message TTL of {namespace} set to {ttl} s")


@namespaces.command("get-message-ttl")
@click.argument("namespace")
@json_option
@pass_admin
def namespaces_get_ttl(admin: Admin, namespace: str) -> None:
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/messageTTL"
    admin.show(admin.request("GET", path))


@namespaces.command("set-auto-topic-creation")
@click.argument("namespace")
@click.option("--enable/--disable", "-e/-d", required=True)
@json_option
@pass_admin
def namespaces_set_auto_creation(admin: Admin, namespace: str, enable: bool) -> None:
    path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/autoTopicCreation"
    admin.request("POST", path, {"allowAutoTopicCreation": enable, "topicType": "non-partitioned"})
    admin.done(f"Auto topic creation {'enabled' if enable else 'disabled'} on {namespace}")


# ---------------------------------------------------------------------------- topics


@main.group()
def topics() -> None:
    """Topics, partitioned topics and subscriptions."""


@topics.command("list")
@click.argument("namespace")
@json_option
@pass_admin
def topics_list(admin: Admin, namespace: str) -> None:
    path = f"/admin/v2/persistent/{_namespace_path(namespace)}"
    admin.show(admin.request("GET", path), title="topic")


@topics.command("list-partitioned-topics")
@click.argument("namespace")
@json_option
@pass_admin
def topics_list_partitioned(admin: Admin, namespace: str) -> None:
    path = f"/admin/v2/persistent/{_namespace_path(namespace)}/partitioned"
    admin.show(admin.request("GET", path), title="partitioned topic")


@topics.command("create")
@click.argument("topic")
@json_option
@pass_admin
def topics_create(admin: Admin, topic: str) -> None:
    admin.request("PUT", _topic_path(topic))
    admin.done(f"Created topic {_topic(topic).full_name}")


@topics.command("create-partitioned-topic")
@click.argument("topic")
@click.option("-p", "--partitions", type=int, required=True, help="Number of partitions.")
@json_option
@pass_admin
def topics_create_partitioned(admin: Admin, topic: str, partitions: int) -> None:
    admin.request("PUT", _topic_path(topic) + "/partitions", partitions)
    admin.done(f"Created partitioned topic {_topic(topic).full_name} with {partitions} partitions")


@topics.command("update-partitioned-topic")
@click.argument("topic")
@click.option("-p", "--partitions", type=int, required=True, help="New number of partitions.")
@json_option
@pass_admin
def topics_update_partitioned(admin: Admin, topic: str, partitions: int) -> None:
    admin.request("POST", _topic_path(topic) + "/partitions", partitions)
    admin.done(f"Updated {_topic(topic).full_name} to {partitions} partitions")


@topics.command("get-partitioned-topic-metadata")
@click.argument("topic")
@json_option
@pass_admin
def topics_partitioned_metadata(admin: Admin, topic: str) -> None:
    admin.show(admin.request("GET", _topic_path(topic) + "/partitions"))


@topics.command("delete-partitioned-topic")
@click.argument("topic")
@json_option
@pass_admin
def topics_delete_partitioned(admin: Admin, topic: str) -> None:
    admin.request("DELETE", _topic_path(topic) + "/partitions")
    admin.done(f"Deleted partitioned topic {_topic(topic).full_name}")


@topics.command("delete")
@click.argument("topic")
@json_option
@pass_admin
def topics_delete(admin: Admin, topic: str) -> None:
    admin.request("DELETE", _topic_path(topic))
    admin.done(f"Deleted topic {_topic(topic).full_name}")


@topics.command("unload")
@click.argument("topic")
@json_option
@pass_admin
def topics_unload(admin: Admin, topic: str) -> None:
    admin.request("PUT", _topic_path(topic) + "/unload")
    admin.done(f"Unloaded {_topic(topic).full_name}")


@topics.command("terminate")
@click.argument("topic")
@json_option
@pass_admin
def topics_terminate(admin: Admin, topic: str) -> None:
    """Accept no more messages; print the last message's id."""
    last = admin.request("POST", _topic_path(topic) + "/terminate")
    if admin.as_json:
        admin.show(last)
    else:
        admin.done(f"Topic terminated; last message: {last['ledgerId']}:{last['entryId']}")


@topics.command("compact")
@click.argument("topic")
@json_option
@pass_admin
def topics_compact(admin: Admin, topic: str) -> None:
    """Start a compaction (the latest message per key survives)."""
    admin.request("PUT", _topic_path(topic) + "/compaction")
    admin.done(f"Compaction of {_topic(topic).full_name} started")


@topics.command("compaction-status")
@click.argument("topic")
@json_option
@pass_admin
def topics_compaction_status(admin: Admin, topic: str) -> None:
    """NOT_RUN, RUNNING, SUCCESS or ERROR (with the error)."""
    admin.show(admin.request("GET", _topic_path(topic) + "/compaction"))


@topics.command("stats")
@click.argument("topic")
@json_option
@pass_admin
def topics_stats(admin: Admin, topic: str) -> None:
    admin.show_stats(admin.request("GET", _topic_path(topic) + "/stats"))


@topics.command("partitioned-stats")
@click.argument("topic")
@click.option("--per-partition", is_flag=True, help="Include each partition's stats.")
@json_option
@pass_admin
def topics_partitioned_stats(admin: Admin, topic: str, per_partition: bool) -> None:
    query = f"?perPartition={'true' if per_partition else 'false'}"
    admin.show_stats(admin.request("GET", _topic_path(topic) + "/partitioned-stats" + query))


@topics.command("stats-internal")
@click.argument("topic")
@json_option
@pass_admin
def topics_stats_internal(admin: Admin, topic: str) -> None:
    stats = admin.request("GET", _topic_path(topic) + "/internalStats")
    if admin.as_json:
        admin.show(stats)
        return
    admin.show({k: v for k, v in stats.items() if k not in ("ledgers", "cursors")}, title="topic")
    ledgers = Table("ledgerId", "entries", "size", "sealed at (ms)", title="ledgers")
    for ledger in stats.get("ledgers", []):
        sealed = str(ledger["timestamp"]) if ledger["timestamp"] else "(open)"
        ledgers.add_row(
            str(ledger["ledgerId"]), str(ledger["entries"]), str(ledger["size"]), sealed
        )
    admin.out.print(ledgers)
    cursors = Table(
        "cursor", "markDeletePosition", "readPosition", "individuallyDeleted", title="cursors"
    )
    for name, cursor in stats.get("cursors", {}).items():
        cursors.add_row(
            name,
            cursor["markDeletePosition"],
            cursor["readPosition"],
            cursor["individuallyDeletedMessages"],
        )
    admin.out.print(cursors)


@topics.command("subscriptions")
@click.argument("topic")
@json_option
@pass_admin
def topics_subscriptions(admin: Admin, topic: str) -> None:
    admin.show(admin.request("GET", _topic_path(topic) + "/subscriptions"), title="subscription")


def _subscription_path(topic: str, subscription: str) -> str:
    return _topic_path(topic) + "/subscription/" + quote(subscription, safe="")


@topics.command("create-subscription")
@click.argument("topic")
@click.option("-s", "--subscription", required=True)
@click.option(
    "-m",
    "--messageId",
    "message_id",
    default="latest",
    show_default=True,
    help="Where it starts: latest, earliest or ledgerId:entryId.",
)
@json_option
@pass_admin
def topics_create_subscription(
    admin: Admin, topic: str, subscription: str, message_id: str
) -> None:
    admin.request("PUT", _subscription_path(topic, subscription), _message_id(message_id))
    admin.done(f"Created subscription {subscription} on {_topic(topic).full_name}")


@topics.command("unsubscribe")
@click.argument("topic")
@click.option("-s", "--subscription", required=True)
@click.option("-f", "--force", is_flag=True, help="Disconnect its consumers first.")
@json_option
@pass_admin
def topics_unsubscribe(admin: Admin, topic: str, subscription: str, force: bool) -> None:
    suffix = "?force=true" if force else ""
    admin.request("DELETE", _subscription_path(topic, subscription) + suffix)
    admin.done(f"Deleted subscription {subscription} of {_topic(topic).full_name}")


@topics.command("clear-backlog")
@click.argument("topic")
@click.option("-s", "--subscription", required=True)
@json_option
@pass_admin
def topics_clear_backlog(admin: Admin, topic: str, subscription: str) -> None:
    admin.request("POST", _subscription_path(topic, subscription) + "/skip_all")
    admin.done(f"Cleared the backlog of {subscription} on {_topic(topic).full_name}")


@topics.command("reset-cursor")
@click.argument("topic")
@click.option("-s", "--subscription", required=True)
@click.option("-t", "--time", "time_", help="Go back this far: 10m, 3h, 2d, 1w (minutes if bare).")
@click.option("-m", "--messageId", "message_id", help="Go to this message: ledgerId:entryId.")
@json_option
@pass_admin
def topics_reset_cursor(
    admin: Admin, topic: str, subscription: str, time_: str | None, message_id: str | None
) -> None:
    if (time_ is None) == (message_id is None):
        raise click.UsageError("give exactly one of -t/--time and -m/--messageId")
    path = _subscription_path(topic, subscription) + "/resetcursor"
    if time_ is not None:
        minutes = _amount(time_, _UNITS_MINUTES, "time")
        if minutes < 0:
            raise click.BadParameter("the time to go back must be >= 0", param_hint="--time")
        timestamp = int(time.time() * 1000) - minutes * 60_000
        admin.request("POST", f"{path}/{timestamp}")
    else:
        assert message_id is not None
        admin.request("POST", path, _message_id(message_id))
    admin.done(f"Reset {subscription} on {_topic(topic).full_name}")


if __name__ == "__main__":  # pragma: no cover
    main()
