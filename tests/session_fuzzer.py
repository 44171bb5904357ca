"""Session fuzzer (reliability plan R11): well-framed commands with random fields, over sockets.

Two halves:

* ``SessionScript`` turns a seed into an endless, deterministic stream of ``Step``s for one
  connection: frames built with ``protocol.commands`` (and, for a share of them, any handled
  command with every field drawn at random from its protobuf descriptor, and now and then one
  of the heavy shapes of issue #24, ``tests/heavy_sends.py``), plus "wait for the
  reply to request N", "reconnect", "admin" (topic unload, stats, dedup on/off, delete over
  HTTP, in the middle of the traffic) and "yield". The stream depends only on the seed, never
  on what the broker answers, so a seed replays the same frames (only the interleaving of the
  connections and the broker's timing differ between runs).
* ``run_session_fuzz`` plays one script per connection against a broker with asyncio sockets,
  reads and decodes everything the broker sends back (a frame our decoder refuses is a broker
  bug), answers PINGs, reconnects whenever the broker closes the connection, stops early (and
  says so) when the broker stops answering requests, and returns a ``FuzzReport``.

The fields are random but *aimed*: ids come mostly from the ids this connection asked for,
message ids from the small ledger and entry numbers a fuzzed topic really has, topic names from
a small shared pool (so several connections meet on a topic) plus odd spellings. The invariants
(exception handler, logs, a healthy client pair, memory) are checked by the caller: see
``tests/broker_watch.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from protocol import commands, pb
from protocol.batch import SingleMessage, encode_batch
from protocol.errors import ProtocolError
from protocol.framing import (
    SUB_MESSAGE_NAME,
    FrameDecoder,
    encode_command,
    encode_payload_command,
)
from protocol.ids import MessageId, from_u64
from tests.heavy_sends import chunk, empty_record_batch, zstd_key_bomb

T = pb.BaseCommand.Type
U64 = 1 << 64
#: A request (or admin call) unanswered this long on an open connection means a wedge.
REQUEST_DEADLINE_S = 10.0
#: A healthy broker answers every awaited request within 2 s; this many that were not means the
#: broker (a topic) stopped answering, even if no single connection stayed open long enough.
MAX_UNANSWERED = 10

#: Commands the broker serves after CONNECT; the descriptor-driven generator picks among these.
SERVED_TYPES = (
    T.PRODUCER,
    T.SEND,
    T.CLOSE_PRODUCER,
    T.SUBSCRIBE,
    T.FLOW,
    T.ACK,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
    T.SEEK,
    T.GET_LAST_MESSAGE_ID,
    T.UNSUBSCRIBE,
    T.CLOSE_CONSUMER,
    T.CONSUMER_STATS,
    T.LOOKUP,
    T.PARTITIONED_METADATA,
    T.GET_TOPICS_OF_NAMESPACE,
    T.GET_SCHEMA,
    T.GET_OR_CREATE_SCHEMA,
    T.PING,
    T.PONG,
)
#: Reply commands that carry the request id they answer.
_REPLY_FIELDS = {
    T.SUCCESS: "success",
    T.ERROR: "error",
    T.PRODUCER_SUCCESS: "producer_success",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.GET_OR_CREATE_SCHEMA_RESPONSE: "getOrCreateSchemaResponse",
    T.ACK_RESPONSE: "ackResponse",
}


# ---------------------------------------------------------------------------------- steps


@dataclass(frozen=True, slots=True)
class Step:
    """One thing a connection does next.

    ``kind`` is ``"frame"`` (send ``data``; ``label`` names the action), ``"await"`` (wait,
    bounded, for the reply to ``request_id``), ``"reconnect"`` (``abort``: RST instead of FIN),
    ``"admin"`` (an HTTP admin request: ``label`` is the method, ``path`` the path, ``data``
    the body) or ``"yield"`` (let the broker and the other connections run for ``pause`` s).
    """

    kind: str
    data: bytes = b""
    label: str = ""
    request_id: int = 0
    abort: bool = False
    pause: float = 0.0
    path: str = ""


@dataclass(frozen=True, slots=True)
class FuzzPools:
    """Names shared by every connection of a run, so that connections meet on topics."""

    topics: tuple[str, ...]
    odd_topics: tuple[str, ...]
    subscriptions: tuple[str, ...]
    producer_names: tuple[str, ...]
    namespaces: tuple[str, ...]

    @classmethod
    def from_seed(cls, seed: int, topic_count: int = 6) -> FuzzPools:
        rng = random.Random(f"pools-{seed}")
        base = f"persistent://public/default/fuzz-{seed & 0xFFFF:x}"
        topics = tuple(f"{base}-{i}" for i in range(topic_count))
        odd = (
            # Same topic, other spellings.
            f"fuzz-{seed & 0xFFFF:x}-0",
            f"public/default/fuzz-{seed & 0xFFFF:x}-1",
            # Unknown tenant or namespace, other domains, legacy and broken forms.
            "persistent://no-such-tenant/default/x",
            "persistent://public/no-such-ns/x",
            "non-persistent://public/default/x",
            "persistent://public/default",
            "persistent://public/default/",
            "persistent://cluster/public/default/x",
            "",
            "/",
            "persistent://public/default/a/b",
            "persistent://publ ic/default/x",
            # Odd but valid local names: their folders must stay inside the namespace.
            "persistent://public/default/%2e%2e",
            "persistent://public/default/-partition-0",
            f"persistent://public/default/{_random_text(rng, 12)}",
            f"persistent://public/default/{_random_text(rng, 40)}",
        )
        return cls(
            topics=topics,
            odd_topics=odd,
            subscriptions=("s0", "s1", "s2", "shared-sub", ""),
            producer_names=("p0", "p1", "p2", ""),
            namespaces=("public/default", "public/nope", "nope/nope", "", "public", "a/b/c"),
        )


def _random_text(rng: random.Random, max_len: int) -> str:
    alphabet = "abcXYZ019-_=:.~!%é日本\u200b"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, max_len)))


# ---------------------------------------------------------------------------------- script


class SessionScript:
    """The deterministic step stream of one fuzzed connection."""

    def __init__(
        self,
        seed: int,
        connection_index: int,
        pools: FuzzPools,
        *,
        garbage: float,
        topic_deletes: bool = True,
    ):
        self.rng = random.Random(f"session-{seed}-{connection_index}")
        self.pools = pools
        self.garbage = garbage
        self.topic_deletes = topic_deletes
        self._producer_ids: list[int] = []
        self._consumer_ids: list[int] = []
        self._producer_names: dict[int, str] = {}
        self._sequences: Counter[int] = Counter()
        self._next_request = 1
        self._next_id = 1
        self._actions = (
            (self._send, 30),
            (self._ack, 12),
            (self._flow, 8),
            (self._subscribe, 7),
            (self._producer, 6),
            (self._descriptor_command, 5),
            (self._redeliver, 4),
            (self._seek, 3),
            (self._get_last_message_id, 3),
            (self._close_producer, 3),
            (self._close_consumer, 3),
            (self._unsubscribe, 2),
            (self._lookup, 2),
            (self._consumer_stats, 1),
            (self._namespace_topics, 1),
            (self._schema, 1),
            (self._ping, 1),
            (self._reconnect, 0.6),
            (self._admin, 0.4),
            (self._protocol_violation, 0.2),
            (self._heavy, 0.25),
            (self._yield, 2),
        )
        self._choices = [a for a, _ in self._actions]
        self._weights = [w for _, w in self._actions]

    def steps(self) -> Iterator[Step]:
        while True:
            action = self.rng.choices(self._choices, self._weights)[0]
            yield from action()

    # -------------------------------------------------------------- random values

    def _request_id(self) -> int:
        roll = self.rng.random()
        if roll < 0.03 and self._next_request > 1:
            return self.rng.randrange(1, self._next_request)  # reused
        if roll < 0.05:
            return self.rng.randrange(U64)
        self._next_request += 1
        return self._next_request - 1

    def _pick_id(self, known: list[int]) -> int:
        roll = self.rng.random()
        if known and roll < 0.8:
            return self.rng.choice(known)
        if roll < 0.93:
            return self.rng.randrange(8)
        return self.rng.randrange(U64)

    def _new_id(self, known: list[int]) -> int:
        """A fresh id, or (sometimes) one already in use on this connection."""
        if known and self.rng.random() < 0.15:
            return self.rng.choice(known)
        self._next_id += 1
        known.append(self._next_id)
        if len(known) > 12:
            known.pop(0)
        return self._next_id

    def _topic(self) -> str:
        if self.rng.random() < 0.1:
            return self.rng.choice(self.pools.odd_topics)
        return self.rng.choice(self.pools.topics)

    def _message_id(self) -> MessageId:
        """Mostly ids a fuzzed topic really has (small ledger and entry numbers)."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.05:
            return MessageId(from_u64(rng.randrange(U64)), from_u64(rng.randrange(U64)))
        if roll < 0.1:
            return rng.choice((MessageId.earliest, MessageId.latest, MessageId(-1, -1)))
        ledger = rng.choice((0, 0, 1, 1, 2, 3, rng.randrange(16)))
        entry = rng.choice((0, rng.randrange(50), rng.randrange(1000), -1, 1 << 40))
        return MessageId(ledger, entry)

    def _ack_set(self) -> list[int]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.5:
            return []
        words = rng.randint(1, 3)
        return [
            rng.choice((0, -1, 1, rng.randrange(U64), 1 << 63, (1 << rng.randrange(64)) - 1))
            for _ in range(words)
        ]

    # -------------------------------------------------------------- producers

    def _producer(self) -> Iterator[Step]:
        rng = self.rng
        producer_id = self._new_id(self._producer_ids)
        request_id = self._request_id()
        name: str | None = rng.choice((*self.pools.producer_names, None, None))
        if name is not None and rng.random() < 0.3:
            name = f"{name}-{rng.randrange(4)}"
        self._producer_names[producer_id] = name or ""
        data = commands.producer(
            self._topic(),
            producer_id,
            request_id,
            producer_name=name,
            access_mode=rng.choice((0, 0, 0, 1, 2, 3)),
            topic_epoch=rng.choice((None, None, 0, 1, rng.randrange(1 << 40))),
            epoch=rng.randrange(3),
            initial_subscription_name=rng.choice((None, None, None, "init-sub")),
        )
        yield Step("frame", data, "PRODUCER")
        if rng.random() < 0.7:
            yield Step("await", label="PRODUCER", request_id=request_id)

    def _send(self) -> Iterator[Step]:
        rng = self.rng
        producer_id = self._pick_id(self._producer_ids)
        sequence_id = self._sequence_id(producer_id)
        metadata = self._entry_metadata(producer_id, sequence_id)
        payload, batch_size = self._payload()
        if batch_size is not None and rng.random() < 0.9:
            metadata.num_messages_in_batch = batch_size
        entry = self._entry(metadata, payload)
        count = rng.randint(1, 5) if rng.random() < 0.2 else 1
        for _ in range(count):
            data = commands.send(
                producer_id,
                sequence_id,
                entry,
                num_messages=rng.choice((None, None, None, batch_size, rng.randrange(-1, 100))),
                highest_sequence_id=rng.choice(
                    (None, None, None, sequence_id + rng.randrange(5), rng.randrange(1 << 63))
                ),
                is_chunk=rng.random() < 0.03,
                marker=rng.random() < 0.02,
                checksum=rng.random() < 0.95,
            )
            if rng.random() < 0.02:
                bad = bytearray(data)
                bad[-1] ^= 0x40  # payload bit flip under a correct-looking checksum
                data = bytes(bad)
            yield Step("frame", data, "SEND")

    def _sequence_id(self, producer_id: int) -> int:
        rng = self.rng
        roll = rng.random()
        if roll < 0.08 and self._sequences[producer_id] > 0:
            return rng.randrange(self._sequences[producer_id])  # a resend (dedup)
        if roll < 0.12:
            return rng.choice((0, rng.randrange(U64), (1 << 63) - 1))
        self._sequences[producer_id] += 1
        return self._sequences[producer_id]

    def _entry_metadata(self, producer_id: int, sequence_id: int) -> pb.MessageMetadata:
        rng = self.rng
        name = self._producer_names.get(producer_id) or rng.choice(self.pools.producer_names)
        md = pb.MessageMetadata(
            producer_name=name,
            sequence_id=sequence_id % U64,
            publish_time=rng.choice((int(time.time() * 1000), 0, rng.randrange(U64))),
        )
        if rng.random() < 0.2:
            md.partition_key = rng.choice(("k0", "k1", "k2", _random_text(rng, 8)))
        if rng.random() < 0.1:
            md.ordering_key = rng.randbytes(rng.randint(0, 6))
        if rng.random() < 0.05:
            md.deliver_at_time = int(time.time() * 1000) + rng.randint(-1000, 2000)
        if rng.random() < 0.05:
            md.event_time = rng.randrange(U64)
        if rng.random() < 0.05:
            md.highest_sequence_id = rng.randrange(U64)
        if rng.random() < 0.03:
            md.uuid = f"chunk-{rng.randrange(10)}"
            md.num_chunks_from_msg = rng.randint(-1, 4)
            md.total_chunk_msg_size = rng.randint(-1, 1 << 20)
            md.chunk_id = rng.randint(-1, 4)
        if rng.random() < 0.03:
            md.num_messages_in_batch = rng.choice((0, -1, 1 << 30, rng.randrange(20)))
        if rng.random() < 0.02:
            md.marker_type = rng.randrange(30)
        if rng.random() < 0.03:
            md.compression = rng.choice((1, 2, 3, 4))
            md.uncompressed_size = rng.randrange(1 << 20)
        return md

    def _payload(self) -> tuple[bytes, int | None]:
        """A payload and, for a well-formed batch, its message count."""
        rng = self.rng
        if rng.random() < 0.2:
            messages = [
                SingleMessage(
                    payload=rng.randbytes(rng.randint(0, 64)),
                    partition_key=rng.choice((None, "k0", "k1")),
                    sequence_id=rng.choice((None, rng.randrange(100))),
                )
                for _ in range(rng.randint(1, 6))
            ]
            return encode_batch(messages), len(messages)
        return rng.randbytes(rng.choice((0, 1, 16, rng.randint(0, 2048)))), None

    def _entry(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        """``[size][metadata][payload]``; a ``garbage`` share has metadata that does not parse
        as a valid ``MessageMetadata`` (random bytes, a cut or a bit flip), or a lying size."""
        rng = self.rng
        header = metadata.SerializeToString()
        if rng.random() < self.garbage:
            kind = rng.randrange(4)
            if kind == 0:
                header = rng.randbytes(rng.randint(0, 24))
            elif kind == 1 and header:
                header = header[: rng.randrange(len(header))]
            elif kind == 2 and header:
                flipped = bytearray(header)
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
                header = bytes(flipped)
            else:
                size = rng.choice((len(header) + len(payload) + 1, 1 << 31, 0))
                return struct.pack(">I", size) + header + payload
        return struct.pack(">I", len(header)) + header + payload

    def _close_producer(self) -> Iterator[Step]:
        producer_id = self._pick_id(self._producer_ids)
        request_id = self._request_id()
        yield Step("frame", commands.close_producer(producer_id, request_id), "CLOSE_PRODUCER")
        if self.rng.random() < 0.3:
            yield Step("await", label="CLOSE_PRODUCER", request_id=request_id)

    # -------------------------------------------------------------- consumers

    def _subscribe(self) -> Iterator[Step]:
        rng = self.rng
        consumer_id = self._new_id(self._consumer_ids)
        request_id = self._request_id()
        durable = rng.random() < 0.75
        start = self._message_id() if not durable or rng.random() < 0.1 else None
        key_shared = None
        if rng.random() < 0.1:
            key_shared = pb.KeySharedMeta(keySharedMode=rng.choice((0, 1)))
            if rng.random() < 0.5:
                low = rng.randrange(65536)
                key_shared.hashRanges.add(start=low, end=rng.randrange(low, 65536))
        name = rng.choice(self.pools.subscriptions)
        if not durable:
            name = f"reader-{rng.randrange(1 << 20):x}"
        data = commands.subscribe(
            self._topic(),
            name,
            consumer_id,
            request_id,
            rng.choice((0, 1, 1, 2, 3)),
            consumer_name=rng.choice((None, "c", _random_text(rng, 6))),
            priority_level=rng.choice((None, None, 0, 1, rng.randrange(1 << 31))),
            durable=durable,
            start_message_id=start,
            initial_position=rng.choice((0, 1)),
            key_shared_meta=key_shared,
        )
        yield Step("frame", data, "SUBSCRIBE")
        if rng.random() < 0.7:
            yield Step("await", label="SUBSCRIBE", request_id=request_id)
        if rng.random() < 0.7:
            permits = rng.choice((1, 10, 100, 1000))
            yield Step("frame", commands.flow(consumer_id, permits), "FLOW")

    def _flow(self) -> Iterator[Step]:
        rng = self.rng
        permits = rng.choice((0, 1, 5, 100, 1000, (1 << 32) - 1, rng.randrange(1 << 32)))
        yield Step("frame", commands.flow(self._pick_id(self._consumer_ids), permits), "FLOW")

    def _ack(self) -> Iterator[Step]:
        rng = self.rng
        ids: list[MessageId | tuple[MessageId, list[int]]] = []
        for _ in range(rng.choice((0, 1, 1, 1, 2, 5, 20))):
            message_id = self._message_id()
            ack_set = self._ack_set()
            ids.append((message_id, ack_set) if ack_set else message_id)
        data = commands.ack(
            self._pick_id(self._consumer_ids),
            ids,
            ack_type=rng.choice((0, 0, 0, 1)),
            validation_error=rng.choice((None, None, None, None, rng.randrange(5))),
            properties=rng.choice((None, None, {"k": rng.randrange(1 << 40)})),
            request_id=rng.choice((None, None, self._request_id())),
        )
        yield Step("frame", data, "ACK")

    def _redeliver(self) -> Iterator[Step]:
        rng = self.rng
        ids = [self._message_id() for _ in range(rng.choice((0, 0, 1, 3, 10)))]
        data = commands.redeliver_unacknowledged_messages(
            self._pick_id(self._consumer_ids),
            ids,
            consumer_epoch=rng.choice((None, None, rng.randrange(10))),
        )
        yield Step("frame", data, "REDELIVER_UNACKNOWLEDGED_MESSAGES")

    def _seek(self) -> Iterator[Step]:
        rng = self.rng
        consumer_id = self._pick_id(self._consumer_ids)
        request_id = self._request_id()
        if rng.random() < 0.7:
            message_id = self._message_id()
            if rng.random() < 0.3 and 0 <= message_id.entry_id < 1 << 40:
                message_id = MessageId(message_id.ledger_id, message_id.entry_id + 10_000)
            data = commands.seek(consumer_id, request_id, message_id=message_id)
        else:
            now = int(time.time() * 1000)
            when = rng.choice((0, now, now + 3_600_000, now - 5_000, rng.randrange(U64)))
            data = commands.seek(consumer_id, request_id, publish_time=when)
        yield Step("frame", data, "SEEK")
        if rng.random() < 0.5:
            yield Step("await", label="SEEK", request_id=request_id)
            if rng.random() < 0.8:
                # The seek closed the consumer (Java's order); come back as the client would.
                yield from self._subscribe()

    def _get_last_message_id(self) -> Iterator[Step]:
        consumer_id = self._pick_id(self._consumer_ids)
        request_id = self._request_id()
        data = commands.get_last_message_id(consumer_id, request_id)
        yield Step("frame", data, "GET_LAST_MESSAGE_ID")

    def _unsubscribe(self) -> Iterator[Step]:
        consumer_id = self._pick_id(self._consumer_ids)
        yield Step("frame", commands.unsubscribe(consumer_id, self._request_id()), "UNSUBSCRIBE")

    def _close_consumer(self) -> Iterator[Step]:
        consumer_id = self._pick_id(self._consumer_ids)
        request_id = self._request_id()
        yield Step("frame", commands.close_consumer(consumer_id, request_id), "CLOSE_CONSUMER")

    def _consumer_stats(self) -> Iterator[Step]:
        consumer_id = self._pick_id(self._consumer_ids)
        data = commands.consumer_stats(consumer_id, self._request_id())
        yield Step("frame", data, "CONSUMER_STATS")

    # -------------------------------------------------------------- connection level

    def _lookup(self) -> Iterator[Step]:
        rng = self.rng
        topic = self._topic()
        if rng.random() < 0.5:
            data = commands.lookup(
                topic,
                self._request_id(),
                authoritative=rng.random() < 0.5,
                advertised_listener_name=rng.choice((None, None, None, "internal")),
            )
            yield Step("frame", data, "LOOKUP")
        else:
            data = commands.partitioned_metadata(topic, self._request_id())
            yield Step("frame", data, "PARTITIONED_METADATA")

    def _namespace_topics(self) -> Iterator[Step]:
        rng = self.rng
        data = commands.get_topics_of_namespace(
            rng.choice(self.pools.namespaces),
            self._request_id(),
            mode=rng.choice((0, 1, 2)),
            topics_pattern=rng.choice((None, ".*", "(")),
        )
        yield Step("frame", data, "GET_TOPICS_OF_NAMESPACE")

    def _schema(self) -> Iterator[Step]:
        rng = self.rng
        topic = self._topic()
        if rng.random() < 0.6:
            version = rng.choice((None, b"", rng.randbytes(8), (0).to_bytes(8, "big")))
            data = commands.get_schema(topic, self._request_id(), schema_version=version)
            yield Step("frame", data, "GET_SCHEMA")
            return
        cmd = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA)
        cmd.getOrCreateSchema.request_id = self._request_id()
        cmd.getOrCreateSchema.topic = topic
        schema = cmd.getOrCreateSchema.schema
        schema.name = "fuzz"
        schema.type = rng.choice((0, 1, 2, 4, 20))
        schema.schema_data = rng.randbytes(rng.randint(0, 64))
        yield Step("frame", encode_command(cmd), "GET_OR_CREATE_SCHEMA")

    # -------------------------------------------------------------- heavy shapes (issue #24)

    def _heavy(self) -> Iterator[Step]:
        """One request that once kept the broker's loop busy for seconds; it must now cost a
        bounded time per turn (the caller watches the loop's longest gap)."""
        rng = self.rng
        producer_id = self._pick_id(self._producer_ids)
        name = self._producer_names.get(producer_id) or rng.choice(self.pools.producer_names)
        kind = rng.choice(("LARGE_BATCH", "ZSTD_BOMB", "CHUNK_FLOOD", "ACK_FLOOD"))
        if kind == "LARGE_BATCH":
            # At or below the producer's high-water mark once it sent anything: dedup's rare path.
            sequence_id = rng.randrange(self._sequences[producer_id] + 1)
            entry, count = empty_record_batch(name, sequence_id, rng.choice((64 << 10, 1 << 20)))
            data = commands.send(producer_id, sequence_id, entry, num_messages=count)
        elif kind == "ZSTD_BOMB":
            sequence_id = self._sequence_id(producer_id)
            key = f"bomb-{rng.randrange(1 << 32):x}"
            declared = rng.choice((1 << 20, 8 << 20))  # below and above maxMessageSize
            entry, count = zstd_key_bomb(name, sequence_id, key, declared)
            data = commands.send(producer_id, sequence_id, entry, num_messages=count)
        elif kind == "CHUNK_FLOOD":
            sequence_id = self._sequence_id(producer_id)
            uuid = f"flood-{rng.randrange(1 << 32):x}"
            chunks = rng.choice((50, 1000))
            data = b"".join(
                commands.send(
                    producer_id,
                    sequence_id,
                    chunk(name, sequence_id, uuid, i, chunks, b"c" * 64),
                    is_chunk=True,
                )
                for i in range(chunks)
            )
        else:
            ids = [self._message_id() for _ in range(rng.choice((1000, 5000)))]
            data = commands.ack(
                self._pick_id(self._consumer_ids), ids, request_id=self._request_id()
            )
        yield Step("frame", data, kind)

    def _ping(self) -> Iterator[Step]:
        if self.rng.random() < 0.5:
            yield Step("frame", commands.ping(), "PING")
        else:
            yield Step("frame", commands.pong(), "PONG")

    def _reconnect(self) -> Iterator[Step]:
        yield Step("reconnect", abort=self.rng.random() < 0.5)

    def _protocol_violation(self) -> Iterator[Step]:
        """Well-framed but not allowed here: the broker closes this connection."""
        if self.rng.random() < 0.5:
            yield Step("frame", commands.connect("fuzz-again"), "CONNECT")
        else:
            cmd = pb.BaseCommand(type=T.NEW_TXN)
            cmd.newTxn.request_id = self._request_id()
            yield Step("frame", encode_command(cmd), "NEW_TXN")

    def _admin(self) -> Iterator[Step]:
        """Topic admin in the middle of the traffic: unload, stats, dedup on/off, delete."""
        rng = self.rng
        topic = rng.choice(self.pools.topics).removeprefix("persistent://")
        base = f"/admin/v2/persistent/{topic}"
        kind = rng.choices(("unload", "stats", "dedup", "delete"), (6, 3, 2, 1))[0]
        if kind == "delete" and not self.topic_deletes:
            kind = "stats"  # the same random draws either way: the rest of the stream is equal
        if kind == "unload":
            yield Step("admin", label="PUT", path=f"{base}/unload")
        elif kind == "stats":
            yield Step("admin", label="GET", path=f"{base}/stats")
        elif kind == "dedup":
            body = rng.choice((b"true", b"false"))
            yield Step("admin", body, label="POST", path=f"{base}/deduplicationEnabled")
        else:
            yield Step("admin", label="DELETE", path=base)

    def _yield(self) -> Iterator[Step]:
        yield Step("yield", pause=self.rng.choice((0.0, 0.0, 0.0, 0.001, 0.01)))

    # -------------------------------------------------------------- any field, any value

    def _descriptor_command(self) -> Iterator[Step]:
        """A served command with every field drawn from its descriptor (required ones always)."""
        kind = self.rng.choice(SERVED_TYPES)
        cmd = pb.BaseCommand(type=kind)
        sub = getattr(cmd, SUB_MESSAGE_NAME[kind])
        sub.SetInParent()
        self._fill(sub, sub.DESCRIPTOR, depth=0)
        if kind == T.SEND:
            md = self._entry_metadata(cmd.send.producer_id, cmd.send.sequence_id)
            payload, _ = self._payload()
            checksum = self.rng.random() < 0.9
            data = encode_payload_command(cmd, self._entry(md, payload), checksum=checksum)
        else:
            data = encode_command(cmd)
        yield Step("frame", data, f"random {SUB_MESSAGE_NAME[kind]}")

    def _fill(self, message: Any, descriptor: Descriptor, depth: int) -> None:
        rng = self.rng
        for fd in descriptor.fields:
            if fd.is_repeated:
                if depth < 3:
                    for _ in range(rng.choice((0, 0, 1, 2))):
                        self._add_value(message, fd, depth)
            elif fd.is_required or rng.random() < 0.4:
                if fd.type == FieldDescriptor.TYPE_MESSAGE:
                    if depth < 3:
                        child = getattr(message, fd.name)
                        child.SetInParent()
                        self._fill(child, fd.message_type, depth + 1)
                else:
                    setattr(message, fd.name, self._scalar(fd))

    def _add_value(self, message: Any, fd: FieldDescriptor, depth: int) -> None:
        container = getattr(message, fd.name)
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            self._fill(container.add(), fd.message_type, depth + 1)
        else:
            container.append(self._scalar(fd))

    def _scalar(self, fd: FieldDescriptor) -> object:
        rng = self.rng
        name = fd.name.lower()
        kind = fd.type
        if kind == FieldDescriptor.TYPE_ENUM:
            return rng.choice(fd.enum_type.values).number
        if kind == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if kind == FieldDescriptor.TYPE_STRING:
            if name == "topic":
                return self._topic()
            if name == "subscription":
                return rng.choice(self.pools.subscriptions)
            return _random_text(rng, 10) if rng.random() < 0.7 else ""
        if kind == FieldDescriptor.TYPE_BYTES:
            return rng.randbytes(rng.randint(0, 16))
        if "producer_id" in name:
            return self._pick_id(self._producer_ids) % U64
        if "consumer_id" in name:
            return self._pick_id(self._consumer_ids) % U64
        if name == "ledgerid":
            return rng.choice((0, 1, 2, rng.randrange(U64)))
        if name == "entryid":
            return rng.choice((0, rng.randrange(100), rng.randrange(U64)))
        return self._integer(kind)

    def _integer(self, kind: int) -> int:
        rng = self.rng
        signed = {
            FieldDescriptor.TYPE_INT32: 32,
            FieldDescriptor.TYPE_SINT32: 32,
            FieldDescriptor.TYPE_SFIXED32: 32,
            FieldDescriptor.TYPE_INT64: 64,
            FieldDescriptor.TYPE_SINT64: 64,
            FieldDescriptor.TYPE_SFIXED64: 64,
        }
        unsigned = {
            FieldDescriptor.TYPE_UINT32: 32,
            FieldDescriptor.TYPE_FIXED32: 32,
            FieldDescriptor.TYPE_UINT64: 64,
            FieldDescriptor.TYPE_FIXED64: 64,
        }
        if kind in signed:
            bits = signed[kind]
            low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            return rng.choice((0, 1, -1, low, high, rng.randint(-10, 1000), rng.randint(low, high)))
        if kind in unsigned:
            high = (1 << unsigned[kind]) - 1
            return rng.choice((0, 1, 2, high, rng.randint(0, 1000), rng.randint(0, high)))
        if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return rng.choice((0, 1, -1))
        raise AssertionError(f"unhandled field type {kind}")


# ---------------------------------------------------------------------------------- runner


@dataclass
class FuzzReport:
    """What the fuzzer sent, what came back, and what went wrong on the wire."""

    seed: int
    frames_sent: int = 0
    sent_by_label: Counter[str] = field(default_factory=Counter)
    received_by_type: Counter[str] = field(default_factory=Counter)
    errors_by_code: Counter[str] = field(default_factory=Counter)
    closed_by_broker: int = 0
    reconnects: int = 0
    #: Requests the script waited for (2 s) on a connection that stayed open, by command,
    #: and when (seconds after the request) the late ones were answered after all.
    unanswered: Counter[str] = field(default_factory=Counter)
    late_answers: list[tuple[str, float]] = field(default_factory=list)
    #: Never answered: (command, seconds the connection stayed open after the request).
    never_answered: list[tuple[str, float]] = field(default_factory=list)
    admin_by_status: Counter[str] = field(default_factory=Counter)
    #: Set when the broker stopped answering something: the run ends early, the cause named.
    stalled: str | None = None
    #: Broker behaviour the fuzzer itself can see is wrong (a frame our decoder refuses, a
    #: connection the broker would not accept, a write that never drains).
    anomalies: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "frames_sent": self.frames_sent,
            "seconds": round(self.seconds, 2),
            "frames_per_second": round(self.frames_sent / self.seconds) if self.seconds else 0,
            "closed_by_broker": self.closed_by_broker,
            "reconnects": self.reconnects,
            "unanswered": dict(self.unanswered),
            "late_answers": [(label, round(after, 2)) for label, after in self.late_answers],
            "never_answered": [(label, round(open_, 2)) for label, open_ in self.never_answered],
            "anomalies": self.anomalies[:20],
            "sent": dict(self.sent_by_label.most_common()),
            "received": dict(self.received_by_type.most_common()),
            "errors": dict(self.errors_by_code.most_common()),
            "admin": dict(self.admin_by_status.most_common()),
        }


class _Wire:
    """One open socket to the broker: writes frames, decodes replies in a reader task."""

    def __init__(self, report: FuzzReport) -> None:
        self.report = report
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.closed = asyncio.Event()
        self.connected = False
        self.answered: dict[int, float] = {}
        #: request id -> (command, when sent) of requests still unanswered after the wait
        self.late: dict[int, tuple[str, float]] = {}
        self.answer = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self, host: str, port: int) -> bool:
        try:
            self.reader, self.writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), timeout=10
            )
        except (OSError, TimeoutError) as exc:
            self.report.anomalies.append(f"connect to broker failed: {exc!r}")
            return False
        self._task = asyncio.create_task(self._read())
        self.writer.write(commands.connect("magnetar-session-fuzz", protocol_version=20))
        connected = await self.wait_for(lambda: self.connected, 10)
        if not connected:
            self.report.anomalies.append("no CONNECTED within 10 s")
        return connected and not self.closed.is_set()

    async def _read(self) -> None:
        assert self.reader is not None
        decoder = FrameDecoder(max_frame_size=64 * 1024 * 1024)
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    return
                decoder.feed(data)
                for frame in decoder:
                    self._note(frame.type, frame.command)
        except ProtocolError as exc:
            self.report.anomalies.append(f"broker sent a frame our decoder refuses: {exc}")
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed.set()
            self.answer.set()

    def _note(self, kind: int, command: pb.BaseCommand) -> None:
        name = pb.BaseCommand.Type.Name(kind)
        self.report.received_by_type[name] += 1
        if kind == T.CONNECTED:
            self.connected = True
            self.answer.set()
        if kind == T.PING and self.writer is not None and not self.writer.is_closing():
            self.writer.write(commands.pong())  # as every client does: we are alive
        field_name = _REPLY_FIELDS.get(kind)
        if field_name is None:
            return
        reply = getattr(command, field_name)
        self.answered[reply.request_id] = time.monotonic()
        late = self.late.pop(reply.request_id, None)
        if late is not None:
            self.report.late_answers.append((late[0], time.monotonic() - late[1]))
        for error_field in ("error", "error_code"):
            if error_field in reply.DESCRIPTOR.fields_by_name and reply.HasField(error_field):
                code = getattr(reply, error_field)
                self.report.errors_by_code[f"{name}:{pb.ServerError.Name(code)}"] += 1
        self.answer.set()

    async def wait_for(self, condition: Any, within: float) -> bool:
        deadline = time.monotonic() + within
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0 or self.closed.is_set():
                return bool(condition())
            self.answer.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.answer.wait(), timeout=left)
        return True

    async def send(self, data: bytes, drain: bool) -> None:
        assert self.writer is not None
        self.writer.write(data)
        if drain:
            try:
                await asyncio.wait_for(self.writer.drain(), timeout=30)
            except TimeoutError:
                self.report.anomalies.append("broker stopped reading for 30 s (write not drained)")
                self.close(abort=True)

    def close(self, *, abort: bool) -> None:
        if self.writer is None:
            return
        if abort:
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.writer.transport.abort()
        else:
            self.writer.close()

    async def finish(self) -> None:
        now = time.monotonic()
        for label, asked in self.late.values():
            self.report.never_answered.append((label, now - asked))
        self.late.clear()
        if self.writer is not None:
            self.writer.close()  # first, and without awaiting: finish() may be cancelled
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.wait_closed(), timeout=5)


@dataclass(frozen=True, slots=True)
class _Broker:
    host: str
    port: int
    web_port: int | None


async def _admin(broker: _Broker, step: Step, report: FuzzReport) -> None:
    """One HTTP/1.1 admin request (``Connection: close``); the status is all we keep."""
    if broker.web_port is None:
        return
    action = step.path.rsplit("/", 1)[-1] if step.label != "DELETE" else "delete"
    try:
        reader, writer = await asyncio.open_connection(broker.host, broker.web_port)
    except OSError as exc:
        report.admin_by_status[f"{step.label} {action} {type(exc).__name__}"] += 1
        return
    head = (
        f"{step.label} {quote(step.path)} HTTP/1.1\r\nHost: {broker.host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(step.data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    try:
        writer.write(head.encode() + step.data)
        status_line = await asyncio.wait_for(reader.readline(), timeout=REQUEST_DEADLINE_S)
        status = status_line.split()[1].decode() if status_line else "no answer"
    except TimeoutError:
        status = "timeout"
        report.stalled = f"admin {step.label} {step.path} unanswered for 10 s"
        report.anomalies.append(report.stalled)
    except OSError as exc:
        status = type(exc).__name__
    finally:
        writer.close()
    report.admin_by_status[f"{step.label} {action} {status}"] += 1


async def _play(
    broker: _Broker, script: SessionScript, frames: int, report: FuzzReport, wires: set[_Wire]
) -> None:
    """Play ``frames`` frames of ``script``, reconnecting whenever the connection closes."""
    wire: _Wire | None = None
    sent_on: _Wire | None = None  # where the last frame went: an await is about that one
    sent = 0
    steps = script.steps()
    try:
        while sent < frames:
            if wire is None or wire.closed.is_set():
                if wire is not None:
                    report.closed_by_broker += 1
                    wires.discard(wire)
                    await wire.finish()
                wire = _Wire(report)
                wires.add(wire)
                if not await wire.open(broker.host, broker.port):
                    wires.discard(wire)
                    await wire.finish()
                    wire = None
                    await asyncio.sleep(0.1)
                    if len(report.anomalies) > 50:
                        return
                    continue
            step = next(steps)
            if step.kind == "frame":
                sent += 1
                report.frames_sent += 1
                report.sent_by_label[step.label] += 1
                sent_on = wire
                try:
                    await wire.send(step.data, drain=sent % 16 == 0)
                except (ConnectionError, OSError):
                    wire.closed.set()
            elif step.kind == "await":
                if sent_on is not wire:
                    continue  # the request went out on a connection that has closed since
                request_id = step.request_id % U64
                asked = time.monotonic()
                answered = await wire.wait_for(lambda w=wire, r=request_id: r in w.answered, 2.0)
                if not answered and not wire.closed.is_set():
                    report.unanswered[step.label] += 1
                    wire.late[request_id] = (step.label, asked)
            elif step.kind == "admin":
                await _admin(broker, step, report)
            elif step.kind == "reconnect":
                report.reconnects += 1
                wire.close(abort=step.abort)
                wires.discard(wire)
                await wire.finish()
                wire = None
            else:
                await asyncio.sleep(step.pause)
    finally:
        if wire is not None:
            wire.close(abort=False)  # also when cancelled: no socket is left open
            wires.discard(wire)
            await wire.finish()


def _overdue(wires: set[_Wire]) -> str | None:
    """A request still unanswered after REQUEST_DEADLINE_S on a connection that is open."""
    now = time.monotonic()
    for wire in wires:
        if wire.closed.is_set():
            continue
        for label, asked in wire.late.values():
            if now - asked > REQUEST_DEADLINE_S:
                return f"{label} unanswered for {now - asked:.0f} s on an open connection"
    return None


async def run_session_fuzz(
    host: str,
    port: int,
    *,
    seed: int,
    frames: int,
    connections: int = 4,
    garbage: float = 0.05,
    web_port: int | None = None,
    topic_deletes: bool = True,
    on_progress: Any = None,
) -> FuzzReport:
    """Play ``frames`` frames in total over ``connections`` sockets; return what happened.

    ``garbage`` is the share of SENDs whose metadata does not parse. With ``web_port`` the
    scripts' admin steps (unload, stats, dedup on/off, delete) are sent too, else skipped.
    ``on_progress(frames_sent)`` (optional, sync) is called about every 0.25 s, from this loop.
    """
    broker = _Broker(host, port, web_port)
    report = FuzzReport(seed)
    pools = FuzzPools.from_seed(seed)
    share = -(-frames // connections)
    started = time.monotonic()
    wires: set[_Wire] = set()
    players = [
        asyncio.create_task(
            _play(
                broker,
                SessionScript(seed, i, pools, garbage=garbage, topic_deletes=topic_deletes),
                share,
                report,
                wires,
            )
        )
        for i in range(connections)
    ]
    while not all(p.done() for p in players):
        await asyncio.wait(players, timeout=0.25)
        if on_progress is not None:
            on_progress(report.frames_sent)
        overdue = _overdue(wires)
        if overdue is None and sum(report.unanswered.values()) >= MAX_UNANSWERED:
            overdue = f"{MAX_UNANSWERED} requests unanswered for 2 s ({dict(report.unanswered)})"
        if overdue is not None and report.stalled is None:
            report.stalled = f"broker stopped answering: {overdue}"
            report.anomalies.append(report.stalled)
        if report.stalled is not None:
            # A wedged topic: every later request to it would wait too. Stop and say so.
            for player in players:
                player.cancel()
            await asyncio.gather(*players, return_exceptions=True)
            for wire in list(wires):
                wire.close(abort=True)
                await wire.finish()
            break
    for player in players:
        if not player.cancelled():
            player.result()  # a bug in the fuzzer itself must not pass silently
    report.seconds = time.monotonic() - started
    return report
