"""A scripted broker for client tests: a real socket on 127.0.0.1:0, real frames.

``StubBroker`` runs on the test's own event loop and answers like a minimal broker (CONNECTED,
PONG, partitioned metadata 0, lookups pointing at itself, PRODUCER_SUCCESS, SEND_RECEIPT with
growing entry ids, SUCCESS for closes). A test changes any answer by putting a function in
``handlers[type]``: it receives the ``StubConnection`` and the ``Frame`` and writes whatever it
likes (or nothing). Everything received is recorded in ``frames``, so a test can check what the
client put on the wire, byte for byte when needed (``StubConnection.sends``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from protocol import Frame, FrameDecoder, MessageId, commands, pb

T = pb.BaseCommand
Handler = Callable[["StubConnection", Frame], None]


@dataclass
class StubConnection:
    """One client connection as the stub sees it."""

    broker: StubBroker
    writer: asyncio.StreamWriter
    number: int
    frames: list[Frame] = field(default_factory=list)

    def write(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    def abort(self) -> None:
        """Drop the connection (the client sees a reset)."""
        self.writer.transport.abort()

    def of_type(self, frame_type: int) -> list[Frame]:
        return [frame for frame in self.frames if frame.type == frame_type]

    @property
    def sends(self) -> list[Frame]:
        return self.of_type(T.SEND)


class StubBroker:
    """A programmable broker; ``async with StubBroker() as broker``."""

    def __init__(
        self,
        *,
        max_message_size: int | None = commands.DEFAULT_MAX_MESSAGE_SIZE,
        ledger_id: int = 7,
    ) -> None:
        self.max_message_size = max_message_size
        self.ledger_id = ledger_id
        self.connections: list[StubConnection] = []
        self.frames: list[Frame] = []
        self.handlers: dict[int, Handler] = {
            T.CONNECT: self.on_connect,
            T.PING: lambda conn, _frame: conn.write(commands.pong()),
            T.PARTITIONED_METADATA: self.on_partitioned_metadata,
            T.LOOKUP: self.on_lookup,
            T.PRODUCER: self.on_producer,
            T.SEND: self.on_send,
            T.CLOSE_PRODUCER: self.on_close_producer,
        }
        self.next_entry_id = 0
        self.last_sequence_id = -1
        self.producer_name = "stub-producer"
        self.topic_epoch: int | None = None
        self.stored: list[tuple[str, int, bytes]] = []  # (producer name, sequence id, entry)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> StubBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in self.connections:
            connection.abort()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def of_type(self, frame_type: int) -> list[Frame]:
        return [frame for frame in self.frames if frame.type == frame_type]

    @property
    def serving(self) -> int:
        """Connections whose reading side is still open."""
        return len(self._tasks)

    @property
    def live_connections(self) -> list[StubConnection]:
        return [c for c in self.connections if not c.writer.is_closing()]

    async def wait_for(
        self, condition: Callable[[], bool], within: float = 5.0, step: float = 0.005
    ) -> None:
        """Poll ``condition`` on the loop until it holds; fail after ``within`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            if condition():
                return
            if loop.time() > deadline:
                raise AssertionError("condition not reached in time")
            await asyncio.sleep(step)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        connection = StubConnection(self, writer, len(self.connections))
        self.connections.append(connection)
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                decoder.feed(data)
                for frame in decoder:
                    connection.frames.append(frame)
                    self.frames.append(frame)
                    handler = self.handlers.get(frame.type)
                    if handler is not None:
                        handler(connection, frame)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    # --- default answers ----------------------------------------------------------------

    def on_connect(self, conn: StubConnection, _frame: Frame) -> None:
        conn.write(commands.connected("stub", max_message_size=self.max_message_size))

    def on_partitioned_metadata(self, conn: StubConnection, frame: Frame) -> None:
        conn.write(
            commands.partitioned_metadata_response(frame.command.partitionMetadata.request_id)
        )

    def on_lookup(self, conn: StubConnection, frame: Frame) -> None:
        conn.write(commands.lookup_response(frame.command.lookupTopic.request_id, self.url))

    def on_producer(self, conn: StubConnection, frame: Frame) -> None:
        cmd = frame.command.producer
        name = cmd.producer_name if cmd.HasField("producer_name") else self.producer_name
        conn.write(
            commands.producer_success(
                cmd.request_id,
                name,
                last_sequence_id=self.last_sequence_id,
                topic_epoch=self.topic_epoch,
            )
        )

    def on_send(self, conn: StubConnection, frame: Frame) -> None:
        self.receipt(conn, frame)

    def receipt(self, conn: StubConnection, frame: Frame, *, duplicate: bool = False) -> None:
        """Store the SEND's entry and acknowledge it (``duplicate``: answer ``-1:-1``)."""
        send = frame.command.send
        assert frame.entry is not None
        if duplicate:
            message_id = MessageId(-1, -1)
        else:
            message_id = MessageId(self.ledger_id, self.next_entry_id)
            self.next_entry_id += 1
            self.stored.append(("", send.sequence_id, frame.entry))
        conn.write(commands.send_receipt(send.producer_id, send.sequence_id, message_id))

    def on_close_producer(self, conn: StubConnection, frame: Frame) -> None:
        conn.write(commands.success(frame.command.close_producer.request_id))
