"""The ``magnetar-admin`` command: its global options (admin URL, output, credentials, TLS) make
the ``Admin`` every verb is handed; the resource groups hang below it."""

from __future__ import annotations

import click

from broker.admin_cli.clusters import brokers, clusters
from broker.admin_cli.credentials import AdminAuthError, authorization_header
from broker.admin_cli.http import TlsOptions, new_client
from broker.admin_cli.invocation import Admin
from broker.admin_cli.namespaces import namespaces
from broker.admin_cli.render import Output
from broker.admin_cli.tenants import tenants
from broker.admin_cli.topics import topics

__all__ = ["DEFAULT_ADMIN_URL", "main"]

DEFAULT_ADMIN_URL = "http://localhost:8080"


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
    tls = TlsOptions(tls_trust_cert_path, tls_allow_insecure, tls_cert_file, tls_key_file)
    client = ctx.with_resource(new_client(admin_url, authorization, tls))
    ctx.obj = Admin(client, Output(as_json))


for _group in (clusters, brokers, tenants, namespaces, topics):
    main.add_command(_group)
