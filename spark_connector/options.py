"""Options of ``format("dedup-topic")``: parsed once, typed, validated with messages naming
the option.

Pure code (no I/O, no pyspark). Spark hands options over as a case-insensitive mapping whose keys
are lower-cased and whose values are all strings; ``normalize`` makes that a plain lower-cased
dict with other connectors' names resolved to ours (``option_table.ALIASES``: Kafka's
``subscribe``, ``subscribePattern``; pulsar-spark's ``predefinedSubscription``,
``maxEntriesPerTrigger``, ``startingTime``...). An option no table knows is an error with a
did-you-mean (``option_table``); ``client.*``/``pulsar.client.*``, ``pulsar.reader.*`` and
``pulsar.producer.*`` go through ``client_options``; ``authPluginClassName``/``authParams``
through ``auth``. The README's Spark section has the table of every option and its meaning.

``testing.faultDir`` is for the connector's own tests only (``faults``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_connector.client_options import client_kwargs, producer_aliases, reader_kwargs
from spark_connector.offsets import parse_offset_specs, parse_time_specs
from spark_connector.option_table import (
    ALIASES,
    SINK,
    SOURCE,
    OptionError,
    check_known,
    parse_bool,
    parse_float,
    parse_int,
    parse_json,
)
from spark_connector.topics import canonical_topic

__all__ = [
    "SORT_BUFFER_BYTES",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "canonical_topic",
    "normalize",
    "order_columns",
    "sink_column_plan",
]

#: ``exactlyOnce.sortBufferBytes``'s default (``SinkOptions.sort_buffer_bytes``).
SORT_BUFFER_BYTES = 512 * 1024 * 1024

_TOPIC_OPTIONS = ("topic", "topics", "topicspattern", "assign")
_STARTS = ("startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets")
_ENDS = ("endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets")


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """Lower-cased keys, aliases resolved.

    Raises:
        OptionError: an option given twice (e.g. ``topics`` and its alias ``subscribe``).
    """
    out: dict[str, str] = {}
    for key, value in options.items():
        name = key.lower()
        name = ALIASES.get(name, name)
        if name in out:
            raise OptionError(f"option {name!r} given twice (through an alias?)")
        out[name] = value
    return out


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    return default if raw is None else parse_bool(name, raw)


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name)
    return default if raw is None else parse_int(name, raw, minimum)


def _required_int(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = _int(options, name, default, minimum)
    assert value is not None
    return value


def _service_url(options: Mapping[str, str]) -> str:
    url = options.get("service.url", "").strip()
    if not url:
        raise OptionError("option 'service.url' is required (e.g. pulsar://127.0.0.1:6650)")
    return url


def _admin_url(options: Mapping[str, str]) -> str | None:
    url = options.get("admin.url", "").strip()
    if url and not re.match(r"https?://", url):
        raise OptionError(f"option 'admin.url' must be an http(s):// URL, not {url!r}")
    return url.rstrip("/") or None


def _assign(raw: str) -> dict[str, tuple[int, ...]]:
    """Kafka's ``assign``: JSON ``{"topic": [0, 1]}``."""
    value = parse_json("assign", raw)
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option 'assign' must be {{\"topic\": [0, 1]}}, not {raw!r}")
    out = {}
    for topic, parts in value.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise OptionError(f"option 'assign': partitions of {topic!r} must be a list of ints")
        out[canonical_topic(topic)] = tuple(sorted(set(parts)))
    return out


def _topics(options: Mapping[str, str]) -> tuple[tuple[str, ...], str | None, dict[str, Any]]:
    """``(topics, pattern, assignment)`` from exactly one of the topic options."""
    given = [name for name in _TOPIC_OPTIONS if options.get(name)]
    if len(given) != 1:
        raise OptionError(
            "exactly one of 'topic', 'topics' (alias 'subscribe'), 'topicsPattern' "
            f"(alias 'subscribePattern') or 'assign' is required; given: {given or 'none'}"
        )
    if given[0] == "topicspattern":
        pattern = options["topicspattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'topicsPattern' is not a regex: {exc}") from None
        return (), pattern, {}
    if given[0] == "assign":
        assignment = _assign(options["assign"])
        return tuple(sorted(assignment)), None, assignment
    names = options[given[0]].split(",") if given[0] == "topics" else [options["topic"]]
    topics = tuple(sorted({canonical_topic(n) for n in names if n.strip()}))
    if not topics:
        raise OptionError(f"option {given[0]!r} names no topic")
    return topics, None, {}


def _one_of(options: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The one of ``names`` given (Kafka ranks them silently; two at once is an error here)."""
    given = [name for name in names if options.get(name) is not None]
    if len(given) > 1:
        raise OptionError(f"give only one of {', '.join(repr(n) for n in given)}")
    return given[0] if given else None


def _check_position_option(options: Mapping[str, str], name: str | None) -> None:
    """Parse a start/end option now, so a bad value fails at planning (topics not needed)."""
    if name is None:
        return
    raw = options[name]
    if name.endswith("offsets"):
        try:
            parse_offset_specs(raw, [])
        except ValueError as exc:
            raise OptionError(f"option {name!r}: {exc}") from None
    else:
        parse_time_specs(name, raw, [], per_partition=name.endswith("bytimestamp"))


@dataclass(frozen=True)
class SourceOptions:
    service_url: str
    topics: tuple[str, ...] = ()
    topics_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)
    starting: tuple[str, str] | None = None  # (option name, value): which form, what
    ending: tuple[str, str] | None = None
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    subscription_name: str | None = None
    poll_timeout_ms: int = 120_000
    admin_url: str | None = None
    client_options: dict[str, Any] = field(default_factory=dict)
    reader_options: dict[str, Any] = field(default_factory=dict)
    decode_schema: bool = True
    fault_dir: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        """Raises: OptionError."""
        options = normalize(raw)
        check_known(options, SOURCE, "source")
        topics, pattern, assignment = _topics(options)
        start, end = _one_of(options, _STARTS), _one_of(options, _ENDS)
        _check_position_option(options, start)
        _check_position_option(options, end)
        strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(
                f"option 'startingOffsetsByTimestampStrategy' must be error or latest, "
                f"not {strategy!r}"
            )
        return cls(
            service_url=_service_url(options),
            topics=topics,
            topics_pattern=pattern,
            assign=assignment,
            starting=(start, options[start]) if start else None,
            ending=(end, options[end]) if end else None,
            timestamp_strategy=strategy,
            max_offsets_per_trigger=_int(options, "maxoffsetspertrigger", None, 1),
            min_partitions=_int(options, "minpartitions", None, 1),
            include_headers=_bool(options, "includeheaders", False),
            fail_on_data_loss=_bool(options, "failondataloss", True),
            subscription_name=options.get("subscriptionname") or None,
            poll_timeout_ms=_required_int(options, "polltimeoutms", 120_000, 1),
            admin_url=_admin_url(options),
            client_options=client_kwargs(options),
            reader_options=reader_kwargs(options),
            decode_schema=_bool(options, "decodeschema", True),
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
    # Spark's own bound for a Python worker before it spills (``spark.python.worker.memory``,
    # 512m). 32 MiB (earlier builds) spilled a task of 300k rows of 100 B; spilling costs the
    # runs' sort and file writes: exactly-once runs at ~0.6 of at-least-once there (0.36 while
    # the merge was per row in Python).
    sort_buffer_bytes: int = SORT_BUFFER_BYTES
    compression_type: str = "none"  # none, lz4, zlib, zstd, snappy (sink.COMPRESSION)
    dedup_timeout_minutes: float = 360.0
    checkpoint_location: str | None = None
    client_options: dict[str, Any] = field(default_factory=dict)
    admin_url: str | None = None
    encode_schema: bool = True
    encoding: Any = None  # schema_write.RecordEncoding, set at planning (datasource)
    fault_dir: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SinkOptions:
        """Raises: OptionError."""
        options = producer_aliases(normalize(raw))
        check_known(options, SINK, "sink")
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
                options, "exactlyonce.sortbufferbytes", SORT_BUFFER_BYTES, 1
            ),
            compression_type=_compression(options),
            dedup_timeout_minutes=_minutes(options),
            checkpoint_location=options.get("checkpointlocation") or None,
            client_options=client_kwargs(options),
            admin_url=_admin_url(options),
            encode_schema=_bool(options, "encodeschema", True),
            fault_dir=options.get("testing.faultdir"),
        )


_COMPRESSION_TYPES = ("none", "lz4", "zlib", "zstd", "snappy")


def _compression(options: Mapping[str, str]) -> str:
    """``compressionType`` (pulsar-spark: ``pulsar.producer.compressionType``), lower-cased."""
    raw = options.get("compressiontype", "none").strip().lower()
    if raw not in _COMPRESSION_TYPES:
        raise OptionError(
            f"option 'compressionType' must be one of {', '.join(_COMPRESSION_TYPES)}, not {raw!r}"
        )
    return raw


def _minutes(options: Mapping[str, str]) -> float:
    name = "brokerdeduplicationproducerinactivitytimeoutminutes"
    raw = options.get(name)
    if raw is None:
        return 360.0
    try:
        return parse_float(name, raw, 0)
    except OptionError:
        raise OptionError(
            f"option 'brokerDeduplicationProducerInactivityTimeoutMinutes' must be a number "
            f"of minutes >= 0, not {raw!r}"
        ) from None


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
