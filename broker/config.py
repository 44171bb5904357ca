"""The broker's one configuration object, and how it is loaded.

`BrokerConfig` is a frozen dataclass passed explicitly to everything that needs a setting
(uvicorn's single `Config`); nothing reads settings from globals. The environment is read once,
by the command line, and handed to `load_config` (`MAGNETAR_<key>` variables, for containers).

Rules this module keeps:

1. Names: every setting has exactly one file/CLI key, the camelCase name Pulsar uses in
   `broker.conf` where the concept exists (`brokerServicePort`), and one attribute, its
   snake_case (`broker_service_port`). `conf/broker.toml` uses the keys; code uses attributes.
2. Every instance is valid: `__post_init__` checks type and range of every field, so a
   `BrokerConfig(...)` built directly in a test is held to the same rules as one loaded from
   a file. Anything wrong raises `ConfigError` whose message names the key.
3. Unknown keys are errors, never ignored: a typo in a config file must not silently fall
   back to a default.
4. The defaults live here only; `conf/broker.toml` repeats them with comments and a test
   checks that the two agree.
5. Precedence, lowest first: defaults, the TOML file, `MAGNETAR_<key>` environment variables,
   `--set key=value`. A `MAGNETAR_` variable that names no key is an error like a typo in the
   file (the key part may be in any case: `MAGNETAR_BROKERSERVICEPORT` works too).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from broker.schemas.strategy import Strategy
from protocol._accel import PURE_PYTHON_ENV

__all__ = ["ENV_PREFIX", "BrokerConfig", "ConfigError", "config_keys", "load_config"]

#: Environment variables `MAGNETAR_<key>=value` override the file (see `load_config`).
ENV_PREFIX = "MAGNETAR_"
#: `MAGNETAR_` variables that are no key: MAGNETAR_PURE_PYTHON picks the SEND path's
#: implementation for the whole process (protocol/_accel.py).
_NOT_KEYS = frozenset({PURE_PYTHON_ENV})

# Java's MESSAGE_SIZE_FRAME_PADDING: a frame carries the message plus command and metadata,
# so the frame reader accepts this much more than maxMessageSize.
_FRAME_PADDING = 10 * 1024
# CommandConnected.max_message_size is an int32 on the wire.
_INT32_MAX = 2**31 - 1
_MAX_PORT = 65535
# Pulsar's schema compatibility strategies, named once (broker/schemas/strategy.py imports nothing).
_SCHEMA_STRATEGIES = tuple(strategy.value for strategy in Strategy)


class ConfigError(Exception):
    """A configuration key is unknown or has an unacceptable value.

    `key` is the camelCase key at fault (None for file-level problems such as a missing
    file); the message always names it.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, slots=True)
class _Rule:
    """What a field accepts: its key plus an inclusive range or a set of choices."""

    key: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    non_empty: bool = False


_T = TypeVar("_T")


def _setting(
    key: str,
    default: _T,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] = (),
    non_empty: bool = False,
) -> _T:
    """Declare a field: its default and the `_Rule` `__post_init__` enforces."""
    rule = _Rule(key, minimum, maximum, choices, non_empty)
    result: _T = field(default=default, metadata={"rule": rule})
    return result


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Resolved broker settings. See `conf/broker.toml` for what each key means."""

    # --- identity and sockets -------------------------------------------------------------
    cluster_name: str = _setting("clusterName", "standalone", non_empty=True)
    # Loopback by default (issue #15: safe defaults); the Docker image binds every interface.
    bind_address: str = _setting("bindAddress", "127.0.0.1", non_empty=True)
    advertised_address: str = _setting("advertisedAddress", "localhost", non_empty=True)
    broker_service_port: int = _setting("brokerServicePort", 6650, minimum=0, maximum=_MAX_PORT)
    web_service_port: int = _setting("webServicePort", 8080, minimum=0, maximum=_MAX_PORT)
    data_dir: str = _setting("dataDir", "./data", non_empty=True)

    # --- connections ----------------------------------------------------------------------
    max_message_size: int = _setting(
        "maxMessageSize", 5_242_880, minimum=1, maximum=_INT32_MAX - _FRAME_PADDING
    )
    keep_alive_interval_seconds: int = _setting("keepAliveIntervalSeconds", 30, minimum=1)
    connection_handshake_timeout_seconds: int = _setting(
        "connectionHandshakeTimeoutSeconds", 10, minimum=1
    )
    max_pending_publish_requests_per_connection: int = _setting(
        "maxPendingPublishRequestsPerConnection", 1000, minimum=1
    )
    # Pulsar's connection caps, checked when a connection is accepted; 0 = unlimited.
    broker_max_connections: int = _setting("brokerMaxConnections", 0, minimum=0)
    broker_max_connections_per_ip: int = _setting("brokerMaxConnectionsPerIp", 0, minimum=0)
    connection_write_buffer_high_water_mark_bytes: int = _setting(
        "connectionWriteBufferHighWaterMarkBytes", 4_194_304, minimum=1
    )
    connection_write_buffer_low_water_mark_bytes: int = _setting(
        "connectionWriteBufferLowWaterMarkBytes", 1_048_576, minimum=0
    )
    broker_shutdown_timeout_ms: int = _setting("brokerShutdownTimeoutMs", 10_000, minimum=0)
    allow_auto_topic_creation: bool = _setting("allowAutoTopicCreation", True)
    # Partitioned auto-creation is not implemented; refusing the value beats ignoring it.
    allow_auto_topic_creation_type: str = _setting(
        "allowAutoTopicCreationType", "non-partitioned", choices=("non-partitioned",)
    )

    # --- storage --------------------------------------------------------------------------
    managed_ledger_max_entries_per_ledger: int = _setting(
        "managedLedgerMaxEntriesPerLedger", 50_000, minimum=1
    )
    managed_ledger_max_size_per_ledger_mbytes: int = _setting(
        "managedLedgerMaxSizePerLedgerMbytes", 2048, minimum=1
    )
    managed_ledger_cache_size_mb: int = _setting("managedLedgerCacheSizeMB", 64, minimum=0)
    journal_sync_data: bool = _setting("journalSyncData", True)
    db_storage_direct_io_entry_logger: bool = _setting("dbStorage_directIOEntryLogger", True)
    journal_max_group_wait_msec: float = _setting("journalMaxGroupWaitMSec", 0.0, minimum=0)
    journal_max_group_size_bytes: int = _setting("journalMaxGroupSizeBytes", 4_194_304, minimum=1)
    managed_ledger_cursor_persist_interval_ms: int = _setting(
        "managedLedgerCursorPersistIntervalMs", 1000, minimum=0
    )
    # -1 = keep forever, 0 = delete once every subscription has consumed (Pulsar semantics).
    # Magnetar keeps 7 days with no size limit by default (Pulsar: 0 and 0): effectively-once
    # consumers are Readers that hold no cursor, and with 0 a segment roll deletes what nobody
    # subscribed to (issue #10, item 6). Set both to 0 for Pulsar's behaviour.
    default_retention_time_in_minutes: int = _setting(
        "defaultRetentionTimeInMinutes", 7 * 24 * 60, minimum=-1
    )
    default_retention_size_in_mb: int = _setting("defaultRetentionSizeInMB", -1, minimum=-1)
    managed_ledger_max_batch_deleted_index_to_persist: int = _setting(
        "managedLedgerMaxBatchDeletedIndexToPersist", 10_000, minimum=0
    )
    dispatcher_max_read_batch_size: int = _setting("dispatcherMaxReadBatchSize", 100, minimum=1)
    dispatcher_max_read_size_bytes: int = _setting(
        "dispatcherMaxReadSizeBytes", 5_242_880, minimum=1
    )
    # On here, off in Pulsar (why: broker/dispatch/dispatcher.py, DispatchLimits).
    precise_dispatcher_flow_control: bool = _setting("preciseDispatcherFlowControl", True)

    # --- compaction (issue #14): backlog bytes after the compaction horizon that start a run
    # by themselves; 0 disables (Pulsar's default is 100 MiB; Magnetar's is off).
    broker_service_compaction_threshold_in_bytes: int = _setting(
        "brokerServiceCompactionThresholdInBytes", 0, minimum=0
    )

    # --- PIP-6 deduplication --------------------------------------------------------------
    # Pulsar defaults this to false because dedup costs a snapshot cursor per topic. Magnetar
    # defaults it to true: effectively-once publishing is the product, and a broker that
    # silently stores retried duplicates unless configured otherwise would undermine it.
    broker_deduplication_enabled: bool = _setting("brokerDeduplicationEnabled", True)
    broker_deduplication_entries_interval: int = _setting(
        "brokerDeduplicationEntriesInterval", 1000, minimum=1
    )
    broker_deduplication_snapshot_interval_seconds: int = _setting(
        "brokerDeduplicationSnapshotIntervalSeconds", 120, minimum=0
    )
    broker_deduplication_snapshot_frequency_in_seconds: int = _setting(
        "brokerDeduplicationSnapshotFrequencyInSeconds", 10, minimum=0
    )
    broker_deduplication_max_number_of_producers: int = _setting(
        "brokerDeduplicationMaxNumberOfProducers", 10_000, minimum=1
    )
    broker_deduplication_producer_inactivity_timeout_minutes: int = _setting(
        "brokerDeduplicationProducerInactivityTimeoutMinutes", 360, minimum=1
    )

    # --- idempotency-key window (issue #16, broker/publish/idempotency_window.py) ---------
    # A message whose ``magnetar.idempotency-key`` was seen on the topic within this many
    # seconds is a duplicate (JetStream's default window: 2 min); 0 turns key checks off.
    idempotency_window_seconds: int = _setting("idempotencyWindowSeconds", 120, minimum=0)
    # Most keys a topic (partition) remembers; the oldest leaves first.
    idempotency_window_max_keys: int = _setting("idempotencyWindowMaxKeys", 100_000, minimum=1)

    # --- schemas (broker/schemas/): Pulsar's keys and defaults ------------------------------
    schema_compatibility_strategy: str = _setting(
        "schemaCompatibilityStrategy", "FULL", choices=_SCHEMA_STRATEGIES
    )
    is_allow_auto_update_schema_enabled: bool = _setting("isAllowAutoUpdateSchemaEnabled", True)
    is_schema_validation_enforced: bool = _setting("isSchemaValidationEnforced", False)

    # --- PIP-54 batch-index acknowledgement -----------------------------------------------
    acknowledgment_at_batch_index_level_enabled: bool = _setting(
        "acknowledgmentAtBatchIndexLevelEnabled", True
    )

    # --- delivery -------------------------------------------------------------------------
    delayed_delivery_enabled: bool = _setting("delayedDeliveryEnabled", True)
    delayed_delivery_tick_time_millis: int = _setting(
        "delayedDeliveryTickTimeMillis", 1000, minimum=1
    )
    # Accepted for broker.conf compatibility; Key_Shared always uses auto-split hash ranges.
    subscription_key_shared_use_consistent_hashing: bool = _setting(
        "subscriptionKeySharedUseConsistentHashing", False
    )

    # --- TLS (Pulsar's keys; see broker/tls.py) ---------------------------------------------
    # -1 = no TLS listener (Pulsar leaves these keys empty); 6651 and 8443 are Pulsar's usual
    # values. The plain ports are switched off with brokerServicePortEnabled/webServicePortEnabled.
    broker_service_port_tls: int = _setting(
        "brokerServicePortTls", -1, minimum=-1, maximum=_MAX_PORT
    )
    web_service_port_tls: int = _setting("webServicePortTls", -1, minimum=-1, maximum=_MAX_PORT)
    broker_service_port_enabled: bool = _setting("brokerServicePortEnabled", True)
    web_service_port_enabled: bool = _setting("webServicePortEnabled", True)
    tls_certificate_file_path: str = _setting("tlsCertificateFilePath", "")
    tls_key_file_path: str = _setting("tlsKeyFilePath", "")
    tls_trust_certs_file_path: str = _setting("tlsTrustCertsFilePath", "")
    tls_allow_insecure_connection: bool = _setting("tlsAllowInsecureConnection", False)
    tls_require_trusted_client_cert_on_connect: bool = _setting(
        "tlsRequireTrustedClientCertOnConnect", False
    )
    tls_protocols: str = _setting("tlsProtocols", "")  # e.g. "TLSv1.3,TLSv1.2"; "" = TLSv1.2+
    tls_ciphers: str = _setting("tlsCiphers", "")  # OpenSSL cipher names, comma-separated

    # --- authentication and authorization (Pulsar's keys; see broker/auth/) -----------------
    authentication_enabled: bool = _setting("authenticationEnabled", False)
    authentication_providers: str = _setting("authenticationProviders", "")
    authentication_refresh_check_seconds: int = _setting(
        "authenticationRefreshCheckSeconds", 60, minimum=1
    )
    # Magnetar: how long a failed authentication waits before its answer (brute-force cost).
    authentication_failure_delay_ms: int = _setting(
        "authenticationFailureDelayMs", 500, minimum=0, maximum=10_000
    )
    anonymous_user_role: str = _setting("anonymousUserRole", "")
    token_secret_key: str = _setting("tokenSecretKey", "")
    token_public_key: str = _setting("tokenPublicKey", "")
    token_auth_claim: str = _setting("tokenAuthClaim", "sub", non_empty=True)
    token_audience_claim: str = _setting("tokenAudienceClaim", "aud", non_empty=True)
    token_audience: str = _setting("tokenAudience", "")
    basic_auth_conf: str = _setting("basicAuthConf", "")
    authorization_enabled: bool = _setting("authorizationEnabled", False)
    super_user_roles: str = _setting("superUserRoles", "")
    # Roles a Pulsar proxy connects as; they must name the client in CONNECT original_principal.
    proxy_roles: str = _setting("proxyRoles", "")
    # Authenticate a proxy's forwarded original_auth_data (Pulsar's default: trust the name).
    authenticate_original_auth_data: bool = _setting("authenticateOriginalAuthData", False)
    authenticate_metrics_endpoint: bool = _setting("authenticateMetricsEndpoint", False)

    # --- cluster mode (issue #18, broker/cluster/): off while metadataStoreUrl is empty ----
    # "etcd:http://host:2379[,http://host2:2379]"; empty = standalone (embedded metadata).
    metadata_store_url: str = _setting("metadataStoreUrl", "")
    default_number_of_namespace_bundles: int = _setting(
        "defaultNumberOfNamespaceBundles", 4, minimum=1, maximum=1024
    )
    # The etcd lease TTL of membership and bundle ownership (Pulsar: the ZooKeeper session).
    metadata_store_session_timeout_millis: int = _setting(
        "metadataStoreSessionTimeoutMillis", 10_000, minimum=2_000, maximum=300_000
    )
    # Pulsar's etcd options file: useTls, tlsTrustCertsFilePath, ..., authority; Magnetar adds
    # user / password (broker/cluster/etcd_config.py). Empty: plain text, no authentication.
    metadata_store_config_path: str = _setting("metadataStoreConfigPath", "")
    # Load balancing of cluster mode (broker/cluster/balancer.py; Pulsar's names and defaults).
    # The interval keys in minutes accept fractions (Pulsar's are whole minutes).
    load_balancer_enabled: bool = _setting("loadBalancerEnabled", True)
    load_balancer_report_update_min_interval_millis: int = _setting(
        "loadBalancerReportUpdateMinIntervalMillis", 5000, minimum=100
    )
    load_balancer_shedding_enabled: bool = _setting("loadBalancerSheddingEnabled", True)
    load_balancer_shedding_interval_minutes: float = _setting(
        "loadBalancerSheddingIntervalMinutes", 1.0, minimum=0.001
    )
    load_balancer_shedding_grace_period_minutes: float = _setting(
        "loadBalancerSheddingGracePeriodMinutes", 30.0, minimum=0
    )
    load_balancer_broker_threshold_shedder_percentage: float = _setting(
        "loadBalancerBrokerThresholdShedderPercentage", 10.0, minimum=0
    )
    load_balancer_history_resource_percentage: float = _setting(
        "loadBalancerHistoryResourcePercentage", 0.9, minimum=0, maximum=0.99
    )
    load_balancer_auto_bundle_split_enabled: bool = _setting(
        "loadBalancerAutoBundleSplitEnabled", True
    )
    load_balancer_auto_unload_split_bundles_enabled: bool = _setting(
        "loadBalancerAutoUnloadSplitBundlesEnabled", True
    )
    load_balancer_namespace_bundle_max_topics: int = _setting(
        "loadBalancerNamespaceBundleMaxTopics", 1000
    )
    load_balancer_namespace_bundle_max_msg_rate: float = _setting(
        "loadBalancerNamespaceBundleMaxMsgRate", 30000.0
    )
    load_balancer_namespace_bundle_max_bandwidth_mbytes: float = _setting(
        "loadBalancerNamespaceBundleMaxBandwidthMbytes", 100.0
    )
    load_balancer_namespace_maximum_bundles: int = _setting(
        "loadBalancerNamespaceMaximumBundles", 128, minimum=1, maximum=1024
    )
    default_namespace_bundle_split_algorithm: str = _setting(
        "defaultNamespaceBundleSplitAlgorithm",
        "range_equally_divide",
        choices=("range_equally_divide", "topic_count_equally_divide"),
    )

    # --- logging and metrics --------------------------------------------------------------
    log_level: str = _setting("logLevel", "INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    expose_topic_level_metrics_in_prometheus: bool = _setting(
        "exposeTopicLevelMetricsInPrometheus", True
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            checked = _check_value(_rule(f), type(f.default), getattr(self, f.name))
            # Coercions (int -> float, PathLike -> str) must stick on a frozen instance.
            object.__setattr__(self, f.name, checked)
        low = self.connection_write_buffer_low_water_mark_bytes
        if low > self.connection_write_buffer_high_water_mark_bytes:
            raise ConfigError(
                "connectionWriteBufferLowWaterMarkBytes must not exceed "
                f"connectionWriteBufferHighWaterMarkBytes ({low} > "
                f"{self.connection_write_buffer_high_water_mark_bytes})",
                key="connectionWriteBufferLowWaterMarkBytes",
            )
        self._check_security()

    def _check_security(self) -> None:
        """TLS listeners need a certificate and key; authentication needs a provider."""
        tls_ports = self.broker_service_port_tls >= 0 or self.web_service_port_tls >= 0
        if tls_ports and not (self.tls_certificate_file_path and self.tls_key_file_path):
            raise ConfigError(
                "brokerServicePortTls/webServicePortTls need tlsCertificateFilePath and "
                "tlsKeyFilePath",
                key="tlsCertificateFilePath",
            )
        if not (self.broker_service_port_enabled or self.broker_service_port_tls >= 0):
            raise ConfigError(
                "brokerServicePortEnabled = false needs brokerServicePortTls",
                key="brokerServicePortEnabled",
            )
        if not (self.web_service_port_enabled or self.web_service_port_tls >= 0):
            raise ConfigError(
                "webServicePortEnabled = false needs webServicePortTls",
                key="webServicePortEnabled",
            )
        if self.authentication_enabled and not self.authentication_providers.strip():
            raise ConfigError(
                "authenticationEnabled needs at least one authenticationProviders entry",
                key="authenticationProviders",
            )

    # --- derived values the broker uses -----------------------------------------------------

    @property
    def data_path(self) -> Path:
        """`dataDir` as a Path (relative paths resolve against the working directory)."""
        return Path(self.data_dir)

    @property
    def frame_limit(self) -> int:
        """Largest frame (`totalSize`) the frame reader accepts: message plus 10 KiB padding."""
        return self.max_message_size + _FRAME_PADDING

    @property
    def shutdown_timeout_seconds(self) -> float:
        """`brokerShutdownTimeoutMs` in seconds, for `asyncio.wait_for`-style bounds."""
        return self.broker_shutdown_timeout_ms / 1000

    @property
    def journal_max_group_wait_seconds(self) -> float:
        """`journalMaxGroupWaitMSec` in seconds."""
        return self.journal_max_group_wait_msec / 1000

    def as_dict(self) -> dict[str, Any]:
        """The settings keyed by their camelCase key, in declaration order."""
        return {_rule(f).key: getattr(self, f.name) for f in dataclasses.fields(self)}

    def describe(self) -> str:
        """The resolved settings as `key = value` lines; valid TOML, for logs and `config`.
        Secrets given inline (a `data:` URL or base64 text) are shown as `<redacted>`."""
        return "".join(
            f"{key} = {_toml_scalar(_shown(key, value))}\n" for key, value in self.as_dict().items()
        )


_NO_OVERRIDES: Mapping[str, str] = MappingProxyType({})


def config_keys() -> tuple[str, ...]:
    """Every accepted camelCase key, in declaration order."""
    return tuple(_FIELDS_BY_KEY)


def load_config(
    path: Path | None,
    overrides: Mapping[str, str] = _NO_OVERRIDES,
    environ: Mapping[str, str] = _NO_OVERRIDES,
) -> BrokerConfig:
    """Build the configuration from defaults, a TOML file, the environment, then `--set`.

    Args:
        path: a flat TOML file of camelCase keys; None means defaults only.
        overrides: `key -> text` pairs applied last. The text is read as a TOML scalar
            (`true`, `42`, `1.5`, `"x"`); for string settings unquoted text is taken
            literally, so `--set dataDir=/tmp/x` works.
        environ: the process environment (the CLI passes `os.environ`); each
            `MAGNETAR_<key>=text` is applied after the file and before `overrides`, its text
            read as for `overrides`. Other variables are ignored.

    Raises:
        ConfigError: the file cannot be read or parsed, or a key is unknown or has a bad
            value. The message names the key and where it came from.
    """
    values: dict[str, Any] = {}
    if path is not None:
        for key, value in _read_toml(path).items():
            values[key] = _checked(key, value, source=str(path))
    for key, text, source in _environment_overrides(environ):
        values[key] = _checked(key, _parse_override(key, text, source), source=source)
    for key, text in overrides.items():
        values[key] = _checked(key, _parse_override(key, text), source="--set")
    names = {_FIELDS_BY_KEY[key].name: value for key, value in values.items()}
    return BrokerConfig(**names)


# --- helpers ----------------------------------------------------------------------------------


def _rule(f: dataclasses.Field[Any]) -> _Rule:
    rule: _Rule = f.metadata["rule"]
    return rule


_FIELDS_BY_KEY: Mapping[str, dataclasses.Field[Any]] = MappingProxyType(
    {_rule(f).key: f for f in dataclasses.fields(BrokerConfig)}
)


_KEYS_BY_LOWER_CASE: Mapping[str, str] = MappingProxyType({k.lower(): k for k in _FIELDS_BY_KEY})


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as stream:
            return tomllib.load(stream)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration file: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def _field_for(key: str, source: str) -> dataclasses.Field[Any]:
    try:
        return _FIELDS_BY_KEY[key]
    except KeyError:
        close = difflib.get_close_matches(key, _FIELDS_BY_KEY, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{source}: unknown configuration key {key!r}{hint}", key) from None


def _checked(key: str, value: object, source: str) -> object:
    """Validate one value on its own, so the error can say where it came from."""
    f = _field_for(key, source)
    try:
        return _check_value(_rule(f), type(f.default), value)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}", key) from None


def _environment_overrides(environ: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """`(key, text, source)` for every `MAGNETAR_<key>` variable, in key order."""
    found: list[tuple[str, str, str]] = []
    for variable, text in sorted(environ.items()):
        if not variable.startswith(ENV_PREFIX) or variable in _NOT_KEYS:
            continue
        name = variable[len(ENV_PREFIX) :]
        source = f"environment variable {variable}"
        key = _KEYS_BY_LOWER_CASE.get(name.lower())
        if key is None:
            _field_for(name, source)  # raises, with a did-you-mean hint
        else:
            found.append((key, text, source))
    return found


def _parse_override(key: str, text: str, source: str = "--set") -> object:
    f = _field_for(key, source)
    wants_text = type(f.default) is str
    try:
        value: object = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        if wants_text:
            # Unquoted text for a string setting (paths, host names, log levels) is meant as is.
            return text
        raise ConfigError(f"{source}: {key}: cannot parse {text!r} as a TOML value", key) from None
    if wants_text and not isinstance(value, str):
        return text  # `--set clusterName=123` means the name "123", not a type error
    return value


def _check_value(rule: _Rule, kind: type, value: object) -> object:
    """Return `value` (possibly coerced to `kind`) or raise ConfigError naming the key."""
    value = _coerce(kind, value)
    # bool is an int subclass; `port = true` must still be rejected.
    if type(value) is not kind:
        raise ConfigError(
            f"{rule.key}: expected {_TYPE_NAMES[kind]}, got {_describe_type(value)} {value!r}",
            rule.key,
        )
    if isinstance(value, str):
        _check_text(rule, value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_range(rule, value)
    return value


def _coerce(kind: type, value: object) -> object:
    if kind is float and type(value) is int:
        return float(value)
    if kind is str and isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def _check_text(rule: _Rule, value: str) -> None:
    if rule.non_empty and not value:
        raise ConfigError(f"{rule.key}: must not be empty", rule.key)
    if rule.choices and value not in rule.choices:
        allowed = ", ".join(repr(c) for c in rule.choices)
        raise ConfigError(f"{rule.key}: {value!r} is not one of {allowed}", rule.key)


def _check_range(rule: _Rule, value: float) -> None:
    if not math.isfinite(value):
        raise ConfigError(f"{rule.key}: {value!r} is not a finite number", rule.key)
    too_small = rule.minimum is not None and value < rule.minimum
    too_large = rule.maximum is not None and value > rule.maximum
    if too_small or too_large:
        low = "" if rule.minimum is None else f">= {rule.minimum:g}"
        high = "" if rule.maximum is None else f"<= {rule.maximum:g}"
        bounds = " and ".join(b for b in (low, high) if b)
        raise ConfigError(f"{rule.key}: {value!r} is out of range (must be {bounds})", rule.key)


_TYPE_NAMES: Mapping[type, str] = MappingProxyType(
    {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
)


def _describe_type(value: object) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


#: Keys whose value may be the secret itself rather than a reference to a file holding it.
_SECRET_KEYS = frozenset({"tokenSecretKey", "basicAuthConf"})


def _shown(key: str, value: object) -> object:
    """``value`` as logs may show it: an inline secret (not a file reference) is redacted."""
    if key not in _SECRET_KEYS or not isinstance(value, str) or not value:
        return value
    if value.startswith("file:"):
        return value
    # A bare path is read as one only for basicAuthConf, and only when it names a file
    # (``broker.auth.keys``): base64 text may start with "/" too, and must stay hidden.
    if key == "basicAuthConf" and Path(value).is_file():
        return value
    return "<redacted>"


def _toml_scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # A JSON string literal is a valid TOML basic string.
        return json.dumps(value)
    return repr(value)
