"""What every verb is handed: ``Admin``, the broker's HTTP client and this invocation's output;
``admin_verb``, the decorator that hands it over; ``reading_verb``, the verb most reads are."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import httpx

from broker.admin_cli.http import RequestFailed, request
from broker.admin_cli.render import Output

__all__ = ["Admin", "admin_verb", "reading_verb"]


@dataclass
class Admin:
    """The broker's client and the output, with what verbs do with them."""

    client: httpx.Client
    output: Output

    @property
    def as_json(self) -> bool:
        return self.output.as_json

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded answer. A failure is printed and ends the command with its exit code."""
        try:
            return request(self.client, method, path, body)
        except RequestFailed as failure:
            self.output.error(str(failure))
            sys.exit(failure.exit_code)

    def show_resource(self, path: str, *, title: str | None = None) -> None:
        """GET ``path`` and show the answer."""
        self.output.show(self.request("GET", path), title=title)

    def change(self, method: str, path: str, body: Any = None, *, done: str) -> None:
        """Make a change; once it went through, say ``done``."""
        self.request(method, path, body)
        self.output.done(done)


_pass_admin = click.make_pass_decorator(Admin)


def admin_verb(verb: Callable[..., None]) -> Callable[..., None]:
    """Hands ``verb`` the ``Admin`` first, and takes ``--json`` after the verb too
    (``magnetar-admin topics list public/default --json``)."""
    return _json_option(_pass_admin(verb))


def _enable_json(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    if value:
        admin = ctx.find_object(Admin)
        assert admin is not None  # the root command made it
        admin.output.as_json = True


_json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    expose_value=False,
    callback=_enable_json,
    help="Print the broker's JSON instead of a table.",
)


def reading_verb(
    name: str,
    argument: str,
    path: Callable[[str], str],
    *,
    title: str | None = None,
    help_text: str | None = None,
) -> click.Command:
    """The verb ``name ARGUMENT``: GET ``path(ARGUMENT)`` and show the answer (see
    ``Output.show`` for ``title``)."""

    @click.command(name, help=help_text)
    @click.argument(argument)
    @admin_verb
    def read(admin: Admin, **arguments: str) -> None:
        admin.show_resource(path(arguments[argument]), title=title)

    return read
