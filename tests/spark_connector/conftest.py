"""Fixtures for the Spark connector: one ``local[2]`` SparkSession for the run, real brokers.

The JVM and every Python worker inherit the environment at launch, so ``PYSPARK_PYTHON`` (this
interpreter: pyarrow and this package live in its venv) and ``SPARK_LOCAL_IP`` are set at import,
before any session starts. Workers import ``spark_connector`` from the editable install.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark_connector.helpers import SESSION_CONF, FixedPortBroker

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from spark_connector import register

    builder = SparkSession.builder.master("local[2]").appName("dedup-topic-tests")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    session = builder.config(
        "spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse"))
    ).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[FixedPortBroker]:
    running = FixedPortBroker(tmp_path / "data")
    running.start()
    try:
        yield running
    finally:
        running.kill()
