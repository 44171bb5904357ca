"""The blocking client's guard: a ``Client`` from before ``os.fork()`` is refused in the child,
where a new one works."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from client import Client, ClientUsedAfterFork
from tests.client.sync.helpers import new_topic, stored
from tests.helpers import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.compat]


def test_a_client_from_before_fork_is_refused_in_the_child_and_a_new_one_works(
    running: BrokerThread, tmp_path: Path
) -> None:
    topic = new_topic()
    report = tmp_path / "child.txt"
    with Client(running.url) as client:
        producer = client.create_producer(topic)
        producer.send(b"parent-before")
        pid = os.fork()
        if pid == 0:  # the child: report in a file, leave with os._exit
            outcome = "?"
            try:
                try:
                    producer.send(b"inherited")
                    outcome = "inherited producer worked"
                except ClientUsedAfterFork as exc:
                    outcome = "refused:" + str(exc)
                try:
                    client.create_producer(topic)
                    outcome += "|inherited client worked"
                except ClientUsedAfterFork:
                    outcome += "|client refused"
                client.close()  # harmless in the child
                with Client(running.url) as fresh:
                    fresh.create_producer(topic).send(b"child")
                outcome += "|fresh client sent"
            except BaseException as exc:
                outcome += f"|error {exc!r}"
            report.write_text(outcome)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        outcome = report.read_text()
        assert outcome.startswith("refused:")
        assert "create a new Client in the child" in outcome
        assert outcome.endswith("|client refused|fresh client sent")
        producer.send(b"parent-after")  # the parent's client is untouched
    assert stored(running.url, topic) == [b"parent-before", b"child", b"parent-after"]
