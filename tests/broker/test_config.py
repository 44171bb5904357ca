"""BrokerConfig: defaults, the shipped conf/broker.toml, validation, overrides, immutability."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import BrokerConfig, ConfigError, config_keys, load_config

SHIPPED_CONF = Path(__file__).resolve().parents[2] / "conf" / "broker.toml"


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return path


# --- defaults and naming ----------------------------------------------------------------------


def test_defaults_match_the_specification() -> None:
    config = BrokerConfig()
    assert config.cluster_name == "standalone"
    assert config.broker_service_port == 6650
    assert config.web_service_port == 8080
    assert config.max_message_size == 5_242_880
    assert config.connection_write_buffer_high_water_mark_bytes == 4_194_304
    assert config.connection_write_buffer_low_water_mark_bytes == 1_048_576
    assert config.journal_max_group_wait_msec == 0.0
    assert config.managed_ledger_cursor_persist_interval_ms == 1000
    # Magnetar departs from Pulsar (false) on purpose: dedup is on unless switched off.
    assert config.broker_deduplication_enabled is True
    assert config.acknowledgment_at_batch_index_level_enabled is True
    assert config.subscription_key_shared_use_consistent_hashing is False
    assert config.log_level == "INFO"
    # Pulsar's defaults: no cap on connections, in total or per IP address.
    assert config.broker_max_connections == 0
    assert config.broker_max_connections_per_ip == 0


def test_load_without_a_file_gives_the_defaults() -> None:
    assert load_config(None) == BrokerConfig()


def test_every_attribute_is_the_snake_case_of_its_key() -> None:
    for field, key in zip(dataclasses.fields(BrokerConfig), config_keys(), strict=True):
        assert field.name == field.name.lower()
        # BookKeeper spells some keys with an underscore (dbStorage_...).
        assert field.name.replace("_", "") == key.lower().replace("_", ""), key


def test_derived_values() -> None:
    config = BrokerConfig(data_dir="/var/lib/magnetar", broker_shutdown_timeout_ms=2500)
    assert config.data_path == Path("/var/lib/magnetar")
    assert config.frame_limit == 5_242_880 + 10_240  # Java's MESSAGE_SIZE_FRAME_PADDING
    assert config.shutdown_timeout_seconds == 2.5
    assert BrokerConfig(journal_max_group_wait_msec=2).journal_max_group_wait_seconds == 0.002


# --- the shipped file -------------------------------------------------------------------------


def test_shipped_file_lists_exactly_the_keys_with_their_defaults() -> None:
    with SHIPPED_CONF.open("rb") as stream:
        document = tomllib.load(stream)
    assert list(document) == list(config_keys())
    assert document == BrokerConfig().as_dict()
    assert load_config(SHIPPED_CONF) == BrokerConfig()


def test_shipped_file_has_a_comment_line_above_every_key() -> None:
    lines = SHIPPED_CONF.read_text().splitlines()
    for key in config_keys():
        (index,) = [i for i, line in enumerate(lines) if line.startswith(f"{key} = ")]
        comment = lines[index - 1]
        assert comment.startswith("# "), key
        assert len(comment) > 20, key


def test_describe_is_toml_that_loads_back_to_the_same_config(tmp_path: Path) -> None:
    config = BrokerConfig(
        cluster_name='we "quote" \\ things', broker_service_port=0, journal_sync_data=False
    )
    assert tomllib.loads(config.describe()) == config.as_dict()
    assert load_config(write_toml(tmp_path, config.describe())) == config


# --- files ------------------------------------------------------------------------------------


def test_file_values_replace_defaults(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path, 'brokerServicePort = 0\ndataDir = "/srv/data"\nlogLevel = "DEBUG"\n'
    )
    config = load_config(path)
    assert (config.broker_service_port, config.data_dir, config.log_level) == (
        0,
        "/srv/data",
        "DEBUG",
    )
    assert config.web_service_port == 8080


def test_unknown_key_in_file_names_key_and_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "brokerServicePrt = 6651\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "brokerServicePrt" in message
    assert str(path) in message
    assert "did you mean 'brokerServicePort'" in message
    assert info.value.key == "brokerServicePrt"


def test_snake_case_key_in_file_is_unknown(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="broker_service_port"):
        load_config(write_toml(tmp_path, "broker_service_port = 1\n"))


def test_table_in_file_is_an_unknown_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'storage'"):
        load_config(write_toml(tmp_path, "[storage]\njournalSyncData = true\n"))


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match=r"absent\.toml"):
        load_config(path)


def test_malformed_toml_names_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "brokerServicePort = = 1\n")
    with pytest.raises(ConfigError, match=r"broker\.toml: invalid TOML"):
        load_config(path)


BAD_VALUES = [
    ("brokerServicePort", "70000", "out of range"),
    ("brokerServicePort", "-1", "out of range"),
    ("brokerServicePort", '"6650"', "expected an integer"),
    ("brokerServicePort", "true", "expected an integer"),
    ("brokerServicePort", "6650.0", "expected an integer"),
    ("webServicePort", "65536", "out of range"),
    ("maxMessageSize", "0", "out of range"),
    ("maxMessageSize", "2147483647", "out of range"),
    ("keepAliveIntervalSeconds", "0", "out of range"),
    ("maxPendingPublishRequestsPerConnection", "0", "out of range"),
    ("brokerMaxConnections", "-1", "out of range"),
    ("brokerMaxConnections", "1.5", "expected an integer"),
    ("brokerMaxConnectionsPerIp", "-1", "out of range"),
    ("brokerMaxConnectionsPerIp", "false", "expected an integer"),
    ("defaultRetentionTimeInMinutes", "-2", "out of range"),
    ("journalMaxGroupWaitMSec", "-0.5", "out of range"),
    ("journalMaxGroupWaitMSec", "nan", "not a finite number"),
    ("journalMaxGroupWaitMSec", "inf", "not a finite number"),
    ("journalSyncData", "1", "expected a boolean"),
    ("clusterName", '""', "must not be empty"),
    ("logLevel", '"TRACE"', "not one of"),
    ("allowAutoTopicCreationType", '"partitioned"', "not one of"),
    ("dataDir", "[1, 2]", "expected a string"),
]


@pytest.mark.parametrize(("key", "literal", "reason"), BAD_VALUES)
def test_bad_value_in_file_names_key_and_file(
    tmp_path: Path, key: str, literal: str, reason: str
) -> None:
    path = write_toml(tmp_path, f"{key} = {literal}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert key in str(info.value)
    assert str(path) in str(info.value)
    assert reason in str(info.value)
    assert info.value.key == key


@pytest.mark.parametrize(
    ("key", "literal", "reason"),
    [bad for bad in BAD_VALUES if bad[0] not in ("clusterName", "dataDir", "logLevel")],
)
def test_bad_value_in_override_names_key(key: str, literal: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {key: literal})
    assert str(info.value).startswith(f"--set: {key}")
    assert reason in str(info.value)


def test_water_marks_must_be_ordered() -> None:
    with pytest.raises(ConfigError, match="connectionWriteBufferLowWaterMarkBytes must not exceed"):
        load_config(None, {"connectionWriteBufferLowWaterMarkBytes": "5000000"})


# --- overrides --------------------------------------------------------------------------------


def test_overrides_are_parsed_as_toml_scalars() -> None:
    config = load_config(
        None,
        {
            "brokerServicePort": "0",
            "journalSyncData": "false",
            "journalMaxGroupWaitMSec": "0.25",
            "clusterName": '"quoted name"',
        },
    )
    assert config.broker_service_port == 0
    assert config.journal_sync_data is False
    assert config.journal_max_group_wait_msec == 0.25
    assert config.cluster_name == "quoted name"


def test_connection_caps_accept_zero_for_unlimited_and_any_positive_cap() -> None:
    config = load_config(None, {"brokerMaxConnections": "0", "brokerMaxConnectionsPerIp": "1"})
    assert (config.broker_max_connections, config.broker_max_connections_per_ip) == (0, 1)
    config = load_config(None, {"brokerMaxConnections": "50000", "brokerMaxConnectionsPerIp": "0"})
    assert (config.broker_max_connections, config.broker_max_connections_per_ip) == (50000, 0)


def test_unquoted_text_is_taken_literally_for_string_settings() -> None:
    config = load_config(
        None, {"dataDir": "/tmp/magnetar data", "logLevel": "DEBUG", "clusterName": "123"}
    )
    assert (config.data_dir, config.log_level, config.cluster_name) == (
        "/tmp/magnetar data",
        "DEBUG",
        "123",
    )


def test_integer_for_a_float_setting_becomes_a_float() -> None:
    value = load_config(None, {"journalMaxGroupWaitMSec": "2"}).journal_max_group_wait_msec
    assert type(value) is float
    assert value == 2.0


def test_override_beats_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "brokerServicePort = 7000\nwebServicePort = 7001\n")
    config = load_config(path, {"brokerServicePort": "7100"})
    assert (config.broker_service_port, config.web_service_port) == (7100, 7001)


def test_unknown_override_key_names_the_key() -> None:
    with pytest.raises(ConfigError, match="--set: unknown configuration key 'noSuchKey'"):
        load_config(None, {"noSuchKey": "1"})


def test_unparsable_override_for_non_string_setting_names_the_key() -> None:
    with pytest.raises(ConfigError, match="--set: brokerServicePort: cannot parse 'abc'"):
        load_config(None, {"brokerServicePort": "abc"})


@settings(max_examples=60, deadline=None)
@given(port=st.integers(min_value=-100_000, max_value=200_000))
def test_port_override_accepted_exactly_in_range(port: int) -> None:
    if 0 <= port <= 65535:
        assert load_config(None, {"webServicePort": str(port)}).web_service_port == port
    else:
        with pytest.raises(ConfigError, match="webServicePort"):
            load_config(None, {"webServicePort": str(port)})


# --- the object -------------------------------------------------------------------------------


def test_config_is_frozen_and_slotted() -> None:
    config = BrokerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.broker_service_port = 1  # type: ignore[misc]
    assert not hasattr(config, "__dict__")


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ConfigError, match="brokerServicePort") as info:
        BrokerConfig(broker_service_port=-1)
    assert info.value.key == "brokerServicePort"
    with pytest.raises(ConfigError, match="maxMessageSize"):
        dataclasses.replace(BrokerConfig(), max_message_size=0)


def test_path_for_data_dir_is_stored_as_text(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path)  # type: ignore[arg-type]
    assert config.data_dir == str(tmp_path)
    assert config.data_path == tmp_path


# --- MAGNETAR_<key> environment overrides -----------------------------------------------------


def test_environment_overrides_the_defaults() -> None:
    config = load_config(
        None,
        environ={
            "MAGNETAR_brokerServicePort": "6651",
            "MAGNETAR_dataDir": "/data",
            "MAGNETAR_journalSyncData": "false",
            "MAGNETAR_journalMaxGroupWaitMSec": "2",
            "PATH": "/usr/bin",  # anything without the prefix is none of our business
            "MAGNETARX_brokerServicePort": "1",
        },
    )
    assert config.broker_service_port == 6651
    assert config.data_dir == "/data"
    assert config.journal_sync_data is False
    assert config.journal_max_group_wait_msec == 2.0


def test_precedence_is_defaults_file_environment_then_set(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path, 'brokerServicePort = 7000\nwebServicePort = 7001\nclusterName = "file"\n'
    )
    environ = {"MAGNETAR_webServicePort": "7101", "MAGNETAR_clusterName": "env"}
    config = load_config(path, {"clusterName": "cli"}, environ)
    assert config.broker_service_port == 7000  # file only
    assert config.web_service_port == 7101  # environment beats the file
    assert config.cluster_name == "cli"  # --set beats the environment
    assert config.max_message_size == BrokerConfig().max_message_size  # default


def test_environment_key_may_be_in_any_case() -> None:
    config = load_config(None, environ={"MAGNETAR_BROKERSERVICEPORT": "6652"})
    assert config.broker_service_port == 6652


def test_unknown_environment_key_is_an_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, environ={"MAGNETAR_brokerServicePrt": "6651"})
    assert "environment variable MAGNETAR_brokerServicePrt" in str(info.value)
    assert "brokerServicePort" in str(info.value)  # the did-you-mean hint


def test_bad_environment_value_names_the_variable_and_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, environ={"MAGNETAR_brokerServicePort": "not-a-port"})
    assert info.value.key == "brokerServicePort"
    assert "MAGNETAR_brokerServicePort" in str(info.value)
    with pytest.raises(ConfigError, match="MAGNETAR_webServicePort"):
        load_config(None, environ={"MAGNETAR_webServicePort": "70000"})


def test_cli_reads_the_environment(tmp_path: Path) -> None:
    """`magnetar config` in a real process: the environment lands between file and --set."""
    path = write_toml(tmp_path, "brokerServicePort = 7000\n")
    environ = {
        **os.environ,
        "MAGNETAR_brokerServicePort": "6651",
        "MAGNETAR_logLevel": "DEBUG",
    }
    done = subprocess.run(
        [sys.executable, "-m", "broker", "config", "--conf", str(path), "--set", "logLevel=ERROR"],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    resolved = tomllib.loads(done.stdout)
    assert resolved["brokerServicePort"] == 6651
    assert resolved["logLevel"] == "ERROR"
    failed = subprocess.run(
        [sys.executable, "-m", "broker", "config"],
        env={**os.environ, "MAGNETAR_nope": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failed.returncode == 2
    assert "MAGNETAR_nope" in failed.stderr
