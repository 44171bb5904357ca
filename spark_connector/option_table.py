"""Every option name ``format("dedup-topic")`` knows, and typed parsing of option values.

Pure code (no I/O, no pyspark). Spark lower-cases option keys and hands every value over as a
string, so a job ported from another connector that keeps a name this one does not know would
otherwise lose its effect without a word (``maxEntriesPerTrigger``, ``includeHeaders``): an
unknown name is an error naming it, with the closest known names (``difflib``). Values are typed
strictly: a boolean is ``true`` or ``false`` and nothing else, because a string like ``"false"``
is truthy in Python and ``tls_allow_insecure_connection=false`` must never turn checks off.

Names with a prefix (``client.``, ``pulsar.client.``, ``pulsar.reader.``, ``pulsar.producer.``)
are checked against their own tables (``client_options``).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ALIASES",
    "FOREIGN",
    "PREFIXES",
    "SINK",
    "SOURCE",
    "SPARK_OWN",
    "OptionError",
    "check_known",
    "closest",
    "display",
    "parse_bool",
    "parse_float",
    "parse_int",
    "parse_json",
    "unknown_message",
]


class OptionError(ValueError):
    """A missing, conflicting, unknown or malformed option of the ``dedup-topic`` data source."""


# The source's options by their documented spelling (Spark lower-cases what users give).
SOURCE = (
    "service.url",
    "admin.url",
    "topic",
    "topics",
    "topicsPattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "includeHeaders",
    "failOnDataLoss",
    "subscriptionName",
    "pollTimeoutMs",
    "decodeSchema",
    "authPluginClassName",
    "authParams",
    "testing.faultDir",
)
SINK = (
    "service.url",
    "admin.url",
    "topic",
    "exactlyOnce",
    "producerNamePrefix",
    "writeId",
    "sendTimeoutMs",
    "maxPendingMessages",
    "producerBusyTimeoutMs",
    "batchingEnabled",
    "batchingMaxMessages",
    "batchingMaxBytes",
    "exactlyOnce.orderBy",
    "exactlyOnce.sortBufferBytes",
    "compressionType",
    "brokerDeduplicationProducerInactivityTimeoutMinutes",
    "encodeSchema",
    "authPluginClassName",
    "authParams",
    "testing.faultDir",
)
# Other connectors' names for ours: (alias, canonical). Resolved before anything else.
ALIASES = {
    "subscribe": "topics",  # Kafka
    "subscribepattern": "topicspattern",  # Kafka
    "predefinedsubscription": "subscriptionname",  # pulsar-spark
    "maxentriespertrigger": "maxoffsetspertrigger",  # pulsar-spark (counts entries too)
    "startingtime": "startingtimestamp",  # pulsar-spark
    "endingtime": "endingtimestamp",  # pulsar-spark
    "kafkaconsumer.polltimeoutms": "polltimeoutms",  # Kafka
}
# What Spark itself adds (measured with pyspark 4.3: ``load(path)``/``save(path)`` give
# ``path``, ``writeStream`` gives ``checkpointLocation`` when set as an option and
# ``queryName``); never the connector's business, so never an error.
SPARK_OWN = ("path", "checkpointLocation", "queryName")
PREFIXES = ("client.", "pulsar.client.", "pulsar.reader.", "pulsar.producer.")
# Known names of the other connectors that have no counterpart here: say why, not "unknown".
FOREIGN = {
    "kafka.bootstrap.servers": "give 'service.url' (pulsar://host:port)",
    "maxbytespertrigger": "not supported: limit micro-batches with 'maxOffsetsPerTrigger'",
    "minoffsetspertrigger": "not supported: use 'maxOffsetsPerTrigger' only",
    "maxtriggerdelay": "not supported (there is no 'minOffsetsPerTrigger')",
    "groupidprefix": "the durable cursor is named by 'subscriptionName' (alias "
    "'predefinedSubscription')",
    "kafka.group.id": "the durable cursor is named by 'subscriptionName'",
    "subscriptionprefix": "give the whole name with 'subscriptionName'",
    "allowdifferenttopicschemas": "topics with different schemas are read raw with "
    "'decodeSchema=false' (or in separate queries)",
    "waitingfornonexistedtopic": "not supported: a topic that does not exist yet is read once "
    "it has data only through 'topicsPattern'",
    "fetchoffset.numretries": "not supported: executors wait up to 'pollTimeoutMs'",
    "fetchoffset.retryintervalms": "not supported: executors wait up to 'pollTimeoutMs'",
}


def _lower(names: Iterable[str]) -> dict[str, str]:
    return {name.lower(): name for name in names}


_DISPLAY = _lower([*SOURCE, *SINK])


def closest(name: str, known: Iterable[str]) -> list[str]:
    """Up to three known names (documented spelling) close to ``name``."""
    by_lower = _lower(known)
    found = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    return [by_lower[key] for key in found]


def unknown_message(name: str, known: Iterable[str], what: str) -> str:
    """The error for an unknown ``name`` among ``known`` (a did-you-mean when one is close)."""
    hint = FOREIGN.get(name.lower())
    if hint is None and name.lower().startswith("pulsar.admin."):
        hint = (
            "admin calls (admin.url) use the client's token or basic credentials: give "
            "them with 'authPluginClassName'/'authParams'"
        )
    if hint is not None:
        return f"dedup-topic: option {name!r} is not supported by the {what}: {hint}"
    near = closest(name, known)
    suggestion = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
    return (
        f"dedup-topic: unknown {what} option {name!r}{suggestion} "
        "(the README's Spark connector section lists every option)"
    )


def check_known(options: Mapping[str, str], names: Iterable[str], what: str) -> None:
    """Fail on the first option (lower-cased key, aliases resolved) that is not in ``names``,
    Spark's own, or under a prefix (checked by ``client_options``).

    Raises:
        OptionError: naming the option, with the closest known names.
    """
    table = _lower(names)
    spark = _lower(SPARK_OWN)
    for key in sorted(options):
        if key in table or key in spark or key.startswith(PREFIXES):
            continue
        other = SINK if what == "source" else SOURCE
        if key in _lower(other) and key not in FOREIGN:
            side = "sink" if what == "source" else "source"
            raise OptionError(
                f"dedup-topic: option {_lower(other)[key]!r} applies to the {side} only, "
                f"not the {what}"
            )
        raise OptionError(unknown_message(key, [*names, *SPARK_OWN, *ALIASES], what))


def display(name: str) -> str:
    """An option's documented spelling (Spark hands keys over lower-cased)."""
    return _DISPLAY.get(name.lower(), name)


def parse_bool(name: str, raw: str) -> bool:
    """``true`` or ``false`` (any case), nothing else.

    Raises:
        OptionError: any other text, naming the option and the value.
    """
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise OptionError(f"option {display(name)!r} must be true or false, not {raw!r}")


def parse_int(name: str, raw: str, minimum: int | None = None, bits: int = 64) -> int:
    """A decimal integer (``bits`` 32 for Java's int, 64 for long), at least ``minimum``.

    Raises:
        OptionError: not an integer, out of range, or below ``minimum``.
    """
    name = display(name)
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise OptionError(f"option {name!r} must fit a {bits}-bit integer, not {raw!r}")
    if minimum is not None and value < minimum:
        raise OptionError(f"option {name!r} must be >= {minimum}, not {value}")
    return value


def parse_float(name: str, raw: str, minimum: float | None = None) -> float:
    """A decimal number, at least ``minimum``.

    Raises:
        OptionError: not a finite number, or below ``minimum``.
    """
    name = display(name)
    try:
        value = float(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a number, not {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise OptionError(f"option {name!r} must be a finite number, not {raw!r}")
    if minimum is not None and value < minimum:
        raise OptionError(f"option {name!r} must be >= {minimum}, not {raw!r}")
    return value


def parse_json(name: str, raw: str) -> Any:
    """JSON text.

    Raises:
        OptionError: not JSON, naming the option and where the text went wrong.
    """
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {display(name)!r} is not valid JSON ({exc}): {raw!r}") from None
