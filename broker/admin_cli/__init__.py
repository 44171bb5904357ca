"""``magnetar-admin``: the admin REST API from a shell, with ``pulsar-admin``'s verbs.

    magnetar-admin [--admin-url URL] [--json] clusters|brokers|tenants|namespaces|topics <verb> ...

Output is a readable table (rich) by default; ``--json`` (before or after the verb) prints the
broker's JSON as it came, for scripts. Exit codes: 0 done; 1 the broker refused the request
(the message gives the HTTP status and Pulsar's ``reason``); 2 bad usage (click's code); 3 the
broker could not be reached.

From the bottom: ``credentials`` (the Authorization header from pulsar-admin's auth options),
``http`` (httpx: base URL, TLS, redirects, failures), ``render`` (tables or JSON),
``invocation`` (the ``Admin`` every verb is handed), ``names`` and ``values`` (arguments into
paths and bodies); one module per resource group (``clusters``, ``tenants``, ``namespaces``,
``topics`` with ``subscriptions``); ``root``, the command itself, gathers them.
"""

from broker.admin_cli.root import main

__all__ = ["main"]
