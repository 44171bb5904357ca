"""Options of ``format("dedup-topic")``: parsed once, validated with messages naming the option.

Pure code (no I/O, no pyspark). Spark hands options over as a case-insensitive mapping whose keys
are lower-cased and whose values are all strings; ``normalize`` makes that a plain lower-cased
dict, so every lookup here uses lower-case names. Names follow the StreamNative pulsar-spark
connector; the Kafka connector's names are accepted as aliases (``subscribe``,
``subscribePattern``, ``predefinedSubscription``).

Source options: ``service.url`` (required); exactly one of ``topic``, ``topics`` (csv),
``topicsPattern`` (Python regex on full topic names of the pattern's namespace);
``startingOffsets``, ``endingOffsets`` (batch), ``maxOffsetsPerTrigger``, ``failOnDataLoss``,
``subscriptionName``, ``pollTimeoutMs``, ``client.*``.

Sink options: ``service.url`` (required), ``topic``, ``exactlyOnce``, ``producerNamePrefix``,
``writeId`` (batch writes, and each write of a ``foreachBatch``), ``sendTimeoutMs``,
``maxPendingMessages``, ``producerBusyTimeoutMs``, ``batchingEnabled``, ``batchingMaxMessages``,
``batchingMaxBytes``, ``exactlyOnce.orderBy`` (columns ordering a task's rows, ``row_order``),
``exactlyOnce.sortBufferBytes``, ``brokerDeduplicationProducerInactivityTimeoutMinutes``
(``replay_age``), ``checkpointLocation`` (Spark's, read by the sink), ``client.*``.

``testing.faultDir`` is for the connector's own tests only (``faults``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.topic_name import InvalidTopicNameError, TopicName

__all__ = [
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "canonical_topic",
    "normalize",
    "order_columns",
    "sink_column_plan",
]

_ALIASES = {
    "subscribe": "topics",
    "subscribepattern": "topicspattern",
    "predefinedsubscription": "subscriptionname",
}
_CLIENT_PREFIX = "client."


class OptionError(ValueError):
    """A missing, conflicting or malformed option of the ``dedup-topic`` data source."""


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """Lower-cased keys, aliases resolved.

    Raises:
        OptionError: an option given twice (e.g. ``topics`` and its alias ``subscribe``).
    """
    out: dict[str, str] = {}
    for key, value in options.items():
        name = key.lower()
        name = _ALIASES.get(name, name)
        if name in out:
            raise OptionError(f"option {name!r} given twice (through an alias?)")
        out[name] = value
    return out


def canonical_topic(name: str) -> str:
    """The full name of a topic (``x`` -> ``persistent://public/default/x``).

    Raises:
        OptionError: not a valid topic name.
    """
    try:
        return TopicName.parse(name.strip()).full_name
    except InvalidTopicNameError as exc:
        raise OptionError(f"invalid topic name {name!r}: {exc}") from None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, not {raw!r}")


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be >= {minimum}, not {value}")
    return value


def _minutes(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a number of minutes, not {raw!r}") from None
    if not value >= 0:
        raise OptionError(f"option {name!r} must be >= 0, not {raw!r}")
    return value


def _required_int(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = _int(options, name, default, minimum)
    assert value is not None
    return value


def _service_url(options: Mapping[str, str]) -> str:
    url = options.get("service.url", "").strip()
    if not url:
        raise OptionError("option 'service.url' is required (e.g. pulsar://127.0.0.1:6650)")
    return url


def _client_options(options: Mapping[str, str]) -> dict[str, Any]:
    """``client.<name>`` options, passed to ``client.sync.Client`` (numbers parsed)."""
    out: dict[str, Any] = {}
    for key, raw in options.items():
        if key.startswith(_CLIENT_PREFIX):
            value: Any = raw
            try:
                value = float(raw) if "." in raw else int(raw)
            except ValueError:
                pass
            out[key[len(_CLIENT_PREFIX) :]] = value
    return out


@dataclass(frozen=True)
class SourceOptions:
    service_url: str
    topics: tuple[str, ...] = ()
    topics_pattern: str | None = None
    starting_offsets: str | None = None
    ending_offsets: str = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    subscription_name: str | None = None
    poll_timeout_ms: int = 120_000
    client_options: dict[str, Any] = field(default_factory=dict)
    fault_dir: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        """Raises: OptionError."""
        options = normalize(raw)
        given = [name for name in ("topic", "topics", "topicspattern") if options.get(name)]
        if len(given) != 1:
            raise OptionError(
                "exactly one of 'topic', 'topics' (alias 'subscribe') or 'topicsPattern' "
                f"(alias 'subscribePattern') is required; given: {given or 'none'}"
            )
        topics: tuple[str, ...] = ()
        pattern = None
        if given[0] == "topicspattern":
            pattern = options["topicspattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise OptionError(f"option 'topicsPattern' is not a regex: {exc}") from None
        else:
            names = options[given[0]].split(",") if given[0] == "topics" else [options["topic"]]
            topics = tuple(sorted({canonical_topic(n) for n in names if n.strip()}))
            if not topics:
                raise OptionError(f"option {given[0]!r} names no topic")
        return cls(
            service_url=_service_url(options),
            topics=topics,
            topics_pattern=pattern,
            starting_offsets=options.get("startingoffsets"),
            ending_offsets=options.get("endingoffsets", "latest"),
            max_offsets_per_trigger=_int(options, "maxoffsetspertrigger", None, 1),
            fail_on_data_loss=_bool(options, "failondataloss", True),
            subscription_name=options.get("subscriptionname") or None,
            poll_timeout_ms=_required_int(options, "polltimeoutms", 120_000, 1),
            client_options=_client_options(options),
            fault_dir=options.get("testing.faultdir"),
        )


# Sink input columns: canonical name -> accepted Spark type names (simpleString).
SINK_COLUMNS: dict[str, tuple[str, ...]] = {
    "value": ("binary", "string"),
    "key": ("binary", "string"),
    "topic": ("string",),
    "partition": ("int", "bigint", "smallint", "tinyint"),
    "eventTime": ("timestamp", "timestamp_ntz"),
    "properties": ("map<string,string>",),
}
SINK_ALIASES = {
    "__key": "key",
    "__topic": "topic",
    "__eventTime": "eventTime",
    "__messageProperties": "properties",
}
# Read-only columns of the source schema: ignored so read -> write works unchanged.
SINK_IGNORED = ("offset", "messageId", "publishTime", "producerName", "sequenceId")
# The source's position columns: they order a task's rows when the input has them (row_order).
SOURCE_POSITION = ("topic", "partition", "offset")


@dataclass(frozen=True)
class SinkOptions:
    service_url: str
    topic: str | None = None
    exactly_once: bool = True
    producer_name_prefix: str = "spark"
    write_id: str | None = None
    send_timeout_ms: int = 30_000
    max_pending_messages: int = 1000
    producer_busy_timeout_ms: int = 60_000
    batching_enabled: bool = True
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * 1024
    order_by: tuple[str, ...] = ()
    sort_buffer_bytes: int = 32 * 1024 * 1024
    dedup_timeout_minutes: float = 360.0
    checkpoint_location: str | None = None
    client_options: dict[str, Any] = field(default_factory=dict)
    fault_dir: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SinkOptions:
        """Raises: OptionError."""
        options = normalize(raw)
        topic = options.get("topic")
        prefix = options.get("producernameprefix", "spark")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", prefix):
            raise OptionError(f"option 'producerNamePrefix' must match [A-Za-z0-9._-]+: {prefix!r}")
        return cls(
            service_url=_service_url(options),
            topic=canonical_topic(topic) if topic else None,
            exactly_once=_bool(options, "exactlyonce", True),
            producer_name_prefix=prefix,
            write_id=options.get("writeid") or None,
            send_timeout_ms=_required_int(options, "sendtimeoutms", 30_000, 0),
            max_pending_messages=_required_int(options, "maxpendingmessages", 1000, 1),
            producer_busy_timeout_ms=_required_int(options, "producerbusytimeoutms", 60_000, 0),
            batching_enabled=_bool(options, "batchingenabled", True),
            batching_max_messages=_required_int(options, "batchingmaxmessages", 1000, 1),
            batching_max_bytes=_required_int(options, "batchingmaxbytes", 128 * 1024, 1),
            order_by=tuple(
                name.strip()
                for name in options.get("exactlyonce.orderby", "").split(",")
                if name.strip()
            ),
            sort_buffer_bytes=_required_int(
                options, "exactlyonce.sortbufferbytes", 32 * 1024 * 1024, 1
            ),
            dedup_timeout_minutes=_minutes(
                options, "brokerdeduplicationproducerinactivitytimeoutminutes", 360.0
            ),
            checkpoint_location=options.get("checkpointlocation") or None,
            client_options=_client_options(options),
            fault_dir=options.get("testing.faultdir"),
        )


def order_columns(fields: list[tuple[str, str]], order_by: tuple[str, ...]) -> tuple[int, ...]:
    """Indexes of the columns that order a task's rows (``row_order``): ``order_by``'s, else
    the source position columns present (``topic``, ``partition``, ``offset``) when the input
    has the source's ``offset``, else none (the rows' content alone orders them).

    Raises:
        OptionError: an ``exactlyOnce.orderBy`` column the input does not have.
    """
    index = {name: i for i, (name, _) in enumerate(fields)}
    if order_by:
        missing = [name for name in order_by if name not in index]
        if missing:
            raise OptionError(
                f"dedup-topic sink: exactlyOnce.orderBy names columns the input does not have: "
                f"{', '.join(missing)} (columns: {', '.join(index)})"
            )
        return tuple(index[name] for name in order_by)
    if "offset" not in index:
        return ()
    return tuple(index[name] for name in SOURCE_POSITION if name in index)


def sink_column_plan(
    fields: list[tuple[str, str]], topic_option: str | None, order_by: tuple[str, ...] = ()
) -> dict[str, int]:
    """Map each sink input role (``value``, ``key``, ...) to its column index.

    ``fields``: the input schema as ``(name, simpleString type)`` pairs. Columns named in
    ``order_by`` (``exactlyOnce.orderBy``) are accepted without a role: they are not sent.

    Raises:
        OptionError: an unknown column, a column of the wrong type, a role given twice
            (``key`` and ``__key``), no ``value``, or no ``topic`` column without the option.
    """
    plan: dict[str, int] = {}
    for index, (name, type_name) in enumerate(fields):
        if name in SINK_IGNORED or (
            name in order_by and SINK_ALIASES.get(name, name) not in SINK_COLUMNS
        ):
            continue
        role = SINK_ALIASES.get(name, name)
        if role not in SINK_COLUMNS:
            raise OptionError(
                f"dedup-topic sink: unknown input column {name!r}; accepted: "
                f"{', '.join([*SINK_COLUMNS, *SINK_ALIASES])} (ignored: {', '.join(SINK_IGNORED)})"
            )
        accepted = SINK_COLUMNS[role]
        if type_name.replace(" ", "") not in accepted:
            raise OptionError(
                f"dedup-topic sink: column {name!r} has type {type_name}, "
                f"want {' or '.join(accepted)}"
            )
        if role in plan:
            raise OptionError(f"dedup-topic sink: column {role!r} given twice ({name!r})")
        plan[role] = index
    if "value" not in plan:
        raise OptionError("dedup-topic sink: a 'value' column (string or binary) is required")
    if "topic" not in plan and topic_option is None:
        raise OptionError("dedup-topic sink: give the 'topic' option or a 'topic' column")
    return plan
