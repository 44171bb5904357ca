"""``client.*`` / ``pulsar.client.*``, ``pulsar.reader.*`` and ``pulsar.producer.*``: the
options passed on to our client, by pulsar-spark's names (the Java client's configuration keys)
or by our client's keyword arguments, with typed values.

Pure code. Each table maps a lower-cased name (Spark lower-cases option keys) to the keyword
argument it sets, its type and, for Java keys in other units, a scale (Java's
``operationTimeoutMs`` is our ``operation_timeout_seconds``). An unknown name under a prefix is
an error with the closest names, like any unknown option.

``pulsar.producer.*`` names the sink's own options (``sendTimeoutMs``...): the sink creates its
producers itself (names, sequence ids and batches are what make it exactly-once), so only the
settings it exposes can be given, under either spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from spark_connector.auth import parse_auth
from spark_connector.option_table import (
    OptionError,
    parse_bool,
    parse_float,
    parse_int,
    unknown_message,
)

__all__ = ["PRODUCER_KEYS", "client_kwargs", "reader_kwargs"]

T = TypeVar("T")

# name (documented spelling) -> (keyword argument, type, scale applied to the parsed number)
_Entry = tuple[str, str, float]
_CLIENT: dict[str, _Entry] = {
    # our client's keyword arguments (today's ``client.*`` names)
    "operation_timeout_seconds": ("operation_timeout_seconds", "float", 1),
    "connection_timeout_ms": ("connection_timeout_ms", "int", 1),
    "keep_alive_interval_seconds": ("keep_alive_interval_seconds", "float", 1),
    "initial_backoff_interval_ms": ("initial_backoff_interval_ms", "int", 1),
    "max_backoff_interval_ms": ("max_backoff_interval_ms", "int", 1),
    "partitions_update_interval_seconds": ("partitions_update_interval_seconds", "float", 1),
    "use_tls": ("use_tls", "bool", 1),
    "tls_trust_certs_file_path": ("tls_trust_certs_file_path", "str", 1),
    "tls_allow_insecure_connection": ("tls_allow_insecure_connection", "bool", 1),
    "tls_validate_hostname": ("tls_validate_hostname", "bool", 1),
    "tls_private_key_file_path": ("tls_private_key_file_path", "str", 1),
    "tls_certificate_file_path": ("tls_certificate_file_path", "str", 1),
    "listener_name": ("listener_name", "str", 1),
    "io_threads": ("io_threads", "int", 1),
    "message_listener_threads": ("message_listener_threads", "int", 1),
    "concurrent_lookup_requests": ("concurrent_lookup_requests", "int", 1),
    "stats_interval_in_seconds": ("stats_interval_in_seconds", "int", 1),
    # the Java client's keys (pulsar-spark passes ``pulsar.client.<key>`` to it)
    "operationTimeoutMs": ("operation_timeout_seconds", "float", 0.001),
    "connectionTimeoutMs": ("connection_timeout_ms", "int", 1),
    "keepAliveIntervalSeconds": ("keep_alive_interval_seconds", "float", 1),
    "initialBackoffIntervalNanos": ("initial_backoff_interval_ms", "int", 1e-6),
    "maxBackoffIntervalNanos": ("max_backoff_interval_ms", "int", 1e-6),
    "useTls": ("use_tls", "bool", 1),
    "tlsTrustCertsFilePath": ("tls_trust_certs_file_path", "str", 1),
    "tlsAllowInsecureConnection": ("tls_allow_insecure_connection", "bool", 1),
    "tlsHostnameVerificationEnable": ("tls_validate_hostname", "bool", 1),
    "tlsKeyFilePath": ("tls_private_key_file_path", "str", 1),
    "tlsCertificateFilePath": ("tls_certificate_file_path", "str", 1),
    "listenerName": ("listener_name", "str", 1),
    "numIoThreads": ("io_threads", "int", 1),
    "numListenerThreads": ("message_listener_threads", "int", 1),
    "concurrentLookupRequest": ("concurrent_lookup_requests", "int", 1),
    "statsIntervalSeconds": ("stats_interval_in_seconds", "int", 1),
}
_AUTH_KEYS = ("authpluginclassname", "authparams")
_AUTH_NAMES = ("authPluginClassName", "authParams")
_READER: dict[str, _Entry] = {
    "receiverQueueSize": ("receiver_queue_size", "int", 1),
    "receiver_queue_size": ("receiver_queue_size", "int", 1),
    "readerName": ("reader_name", "str", 1),
    "reader_name": ("reader_name", "str", 1),
    "subscriptionRolePrefix": ("subscription_role_prefix", "str", 1),
    "subscription_role_prefix": ("subscription_role_prefix", "str", 1),
}
_READER_REFUSED = {
    "readcompacted": "a compacted read skips messages, so a range would not be complete",
    "is_read_compacted": "a compacted read skips messages, so a range would not be complete",
    "topicnames": "give the topics with 'topic', 'topics' or 'topicsPattern'",
    "startmessageid": "give the start with 'startingOffsets'",
}
# pulsar.producer.<Java key> -> the sink option of the same meaning
PRODUCER_KEYS = {
    "sendtimeoutms": "sendtimeoutms",
    "maxpendingmessages": "maxpendingmessages",
    "batchingenabled": "batchingenabled",
    "batchingmaxmessages": "batchingmaxmessages",
    "batchingmaxbytes": "batchingmaxbytes",
    "compressiontype": "compressiontype",
}
_PRODUCER_REFUSED = {
    "producername": "the exactly-once sink names its producers (see 'producerNamePrefix')",
    "initialsequenceid": "the exactly-once sink numbers the messages itself",
    "blockifqueuefull": "the sink always waits for room in the queue",
}


def _typed(name: str, raw: str, kind: str, scale: float) -> Any:
    if kind == "bool":
        return parse_bool(name, raw)
    if kind == "str":
        return raw
    number: float = parse_float(name, raw, 0) if kind == "float" else parse_int(name, raw, 0)
    if scale != 1:
        number = number * scale
    return int(number) if kind == "int" else float(number)


def _known(table: Mapping[str, Any], prefix: str) -> list[str]:
    return [prefix + key for key in table]


def _lookup(table: Mapping[str, T], name: str) -> T | None:
    """``table``'s entry for a lower-cased ``name`` (the tables keep the documented spelling)."""
    for key, value in table.items():
        if key.lower() == name:
            return value
    return None


def client_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments for ``client.sync.Client`` from ``client.<name>``,
    ``pulsar.client.<name>`` and ``authPluginClassName``/``authParams`` (also under either
    prefix); ``authentication`` is an ``AuthSpec`` (built in the worker, ``clients``).

    Raises:
        OptionError: an unknown name, a bad value, one setting given twice.
    """
    out: dict[str, Any] = {}
    auth: dict[str, str] = {}
    for key in sorted(options):
        prefix = next((p for p in ("pulsar.client.", "client.") if key.startswith(p)), None)
        if prefix is None:
            if key in _AUTH_KEYS:
                _put(auth, key, options[key], key)
            continue
        name = key[len(prefix) :]
        if name in _AUTH_KEYS:
            _put(auth, name, options[key], key)
            continue
        entry = _lookup(_CLIENT, name)
        if entry is None:
            known = [*_known(_CLIENT, prefix), *(prefix + k for k in _AUTH_NAMES)]
            raise OptionError(unknown_message(key, known, "client"))
        argument, kind, scale = entry
        _put(out, argument, _typed(key, options[key], kind, scale), key)
    spec = parse_auth(auth.get("authpluginclassname"), auth.get("authparams"))
    if spec is not None:
        out["authentication"] = spec
    return out


def reader_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments for ``create_reader`` from ``pulsar.reader.<name>``.

    Raises:
        OptionError: an unknown or refused name, a bad value.
    """
    out: dict[str, Any] = {}
    prefix = "pulsar.reader."
    for key in sorted(options):
        if not key.startswith(prefix):
            continue
        name = key[len(prefix) :]
        if name in _READER_REFUSED:
            raise OptionError(f"option {key!r} is not supported: {_READER_REFUSED[name]}")
        entry = _lookup(_READER, name)
        if entry is None:
            raise OptionError(unknown_message(key, _known(_READER, prefix), "reader"))
        argument, kind, scale = entry
        _put(out, argument, _typed(key, options[key], kind, scale), key)
    if out.get("receiver_queue_size", 1) < 1:
        raise OptionError("option 'pulsar.reader.receiverQueueSize' must be >= 1")
    return out


def producer_aliases(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with ``pulsar.producer.<key>`` renamed to the sink option it means.

    Raises:
        OptionError: an unknown or refused name, or a setting given under both spellings.
    """
    prefix = "pulsar.producer."
    out = {key: value for key, value in options.items() if not key.startswith(prefix)}
    for key in sorted(set(options) - set(out)):
        name = key[len(prefix) :]
        if name in _PRODUCER_REFUSED:
            raise OptionError(f"option {key!r} is not supported: {_PRODUCER_REFUSED[name]}")
        target = _lookup(PRODUCER_KEYS, name)
        if target is None:
            known = _known(PRODUCER_KEYS, prefix)
            raise OptionError(unknown_message(key, known, "producer"))
        _put(out, target, options[key], key)
    return out


def _put(out: dict[str, Any], name: str, value: Any, given_as: str) -> None:
    if name in out:
        raise OptionError(f"option {given_as!r} sets {name!r}, which another option sets too")
    out[name] = value
