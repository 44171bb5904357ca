"""``clusters`` and ``brokers``: the cluster (one: standalone, or ``clusterName``) and its live
brokers (cluster mode: registered in etcd)."""

from __future__ import annotations

import click

from broker.admin_cli.invocation import Admin, admin_verb, reading_verb
from broker.admin_cli.names import segment

__all__ = ["brokers", "clusters"]


@click.group()
def clusters() -> None:
    """The cluster (one: standalone)."""


@clusters.command("list")
@admin_verb
def clusters_list(admin: Admin) -> None:
    admin.show_resource("/admin/v2/clusters", title="cluster")


clusters.add_command(reading_verb("get", "cluster", lambda c: f"/admin/v2/clusters/{segment(c)}"))


@click.group()
def brokers() -> None:
    """The live brokers (cluster mode: registered in etcd)."""


@brokers.command("list")
@click.argument("cluster", default="standalone")
@admin_verb
def brokers_list(admin: Admin, cluster: str) -> None:
    admin.show_resource(f"/admin/v2/brokers/{segment(cluster)}", title="broker")
