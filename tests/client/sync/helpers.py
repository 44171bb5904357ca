"""What the blocking facade's tests share: topic names, what a topic stores, open sockets."""

from __future__ import annotations

import os
import uuid

import pulsar

from tests.helpers import close_client, new_client


def new_topic() -> str:
    return f"persistent://public/default/sync-{uuid.uuid4().hex[:10]}"


def stored(url: str, topic: str) -> list[bytes]:
    official = new_client(url)
    try:
        reader = official.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(5000).data())
        return out
    finally:
        close_client(official)


def sockets_to(port: int) -> int:
    """Established TCP sockets of this process whose peer is 127.0.0.1:``port``."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            remote_port = int(fields[2].split(":")[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count
