"""``admin.url``: the one admin call the connector makes, a partition's ledgers with their entry
counts (``GET .../internalStats``), so a micro-batch budget spanning ledgers is counted from ids
alone (``budget``). pulsar-spark asks for ``admin.url`` too; without it the planner locates an
entry past a ledger end by asking the broker for that one message instead (``probe``).

Runs in the planner's worker process (blocking HTTP is fine there: no event loop of ours).
The client's token or basic credentials go along (``Authorization``), as pulsar-spark uses the
client's authentication for admin calls when no admin one is given. Failures are logged and
answer None: the planner then falls back to the probe, never fails a query for it.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
import urllib.request
from typing import Any

from spark_connector.auth import AuthSpec
from spark_connector.budget import Ledgers

__all__ = ["ledgers_of"]

logger = logging.getLogger(__name__)

_TIMEOUT_SECONDS = 10


def _authorization(auth: AuthSpec | None) -> str | None:
    if auth is None or auth.method not in ("token", "basic"):
        return None
    return auth.build().http_authorization()


def ledgers_of(admin_url: str, topic: str, auth: AuthSpec | None) -> Ledgers | None:
    """``[(ledger id, entries)]`` of a (partition) topic, oldest first; None on any failure."""
    domain, _, rest = topic.partition("://")
    path = "/".join(urllib.parse.quote(part, safe="") for part in rest.split("/"))
    request = urllib.request.Request(f"{admin_url}/admin/v2/{domain}/{path}/internalStats")
    header = _authorization(auth)
    if header is not None:
        request.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_SECONDS) as reply:
            stats: Any = json.loads(reply.read())
        return [(int(item["ledgerId"]), int(item["entries"])) for item in stats["ledgers"]]
    except Exception:
        logger.warning("admin.url: cannot read the ledgers of %s", topic, exc_info=True)
        return None
