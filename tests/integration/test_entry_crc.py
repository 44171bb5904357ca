"""A SEND's verified checksum travels to the storage, which takes the records' CRCs from it
(issue #26): the official client's batches reach ``Ledger.append_many`` with their CRC-32C, and
the records written that way pass every check on read, after a restart too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import crc32c
import pulsar
import pytest

from broker.storage import Ledger, LedgerConfig
from broker.storage.paths import topic_directory
from protocol.topic_name import TopicName
from tests.helpers import BrokerThread, broker_config, close_client, new_client

pytestmark = pytest.mark.integration

TOPIC = "persistent://public/default/entry-crc"


def test_the_sends_checksum_becomes_the_records_crc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    appended: list[tuple[bytes, int]] = []
    append_many = Ledger.append_many

    def spy(self: Ledger, entries: list[bytes], crcs: list[int] | None = None) -> Any:
        appended.extend(zip(entries, crcs or [-1] * len(entries), strict=True))
        return append_many(self, entries, crcs)

    monkeypatch.setattr(Ledger, "append_many", spy)
    config = broker_config(tmp_path / "data")
    payloads = [bytes([i]) * (3000 + 700 * i) for i in range(40)]  # batches of 3-30 KB
    broker = BrokerThread(config).start()
    try:
        client = new_client(broker.url)
        producer = client.create_producer(TOPIC, batching_max_publish_delay_ms=20)
        for payload in payloads:
            producer.send_async(payload, None)
        producer.flush()
        producer.send(b"small")
        close_client(client)
    finally:
        broker.stop()
    mine = appended  # the topic's every entry: batches of the payloads, then b"small"
    assert len(mine) >= 2
    assert all(crc == crc32c.crc32c(entry) for entry, crc in mine)
    assert any(len(entry) >= 4096 for entry, _ in mine)  # the combined path ran

    # Every record is read back through its CRC check: offline, sealed segments verified ...
    directory = topic_directory(config.data_path, TopicName.parse(TOPIC))
    ledger = Ledger.open(directory, LedgerConfig(verify_sealed_on_open=True))
    first = ledger.first_position
    assert first is not None
    stored = [entry for _, entry in ledger.read(first, 10_000)]
    ledger.close()
    assert stored == [entry for entry, _ in mine]
    # ... and by a consumer of a restarted broker.
    broker = BrokerThread(config).start()
    try:
        client = new_client(broker.url)
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        got = [reader.read_next(10_000).data() for _ in range(len(payloads) + 1)]
        assert got == [*payloads, b"small"]
        close_client(client)
    finally:
        broker.stop()
