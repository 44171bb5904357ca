"""``EtcdClient``: ``aetcd.Client`` over TLS (mutual when a client certificate is given), with a
token that can be renewed.

aetcd opens plain-text channels only (``grpc.aio.insecure_channel`` in its ``connect``), so
``connect`` is redone here with the channel of our choice; the rest of the client (stubs, the
watcher, every operation) is aetcd's, which reads them from the attributes set here (aetcd
1.0's layout). Imported only in cluster mode: it pulls in grpc.

etcd authentication exchanges user and password for a token sent with every call. etcd forgets
its tokens when it restarts (the ``simple`` provider keeps them in memory) and expires them after
``--auth-token-ttl`` idle seconds; ``renew_token`` asks for a new one on the same channel and
hands it to the watcher too, for its next stream.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aetcd
import grpc  # type: ignore[import-untyped]  # no stubs; confined to this module
from aetcd import exceptions, rpc, watcher

from broker.cluster.etcd_config import Endpoint, EtcdOptions


class EtcdClient(aetcd.Client):  # type: ignore[misc]  # aetcd ships no type hints
    _connected: asyncio.Event
    _is_connecting: bool

    def __init__(self, endpoint: Endpoint, options: EtcdOptions, timeout: float) -> None:
        channel_options: dict[str, Any] = {}
        if options.authority:
            # Pulsar's ``authority``: the name the server certificate must carry, and the
            # HTTP/2 :authority sent, when etcd is reached by another name (an IP, a tunnel).
            channel_options["grpc.ssl_target_name_override"] = options.authority
            channel_options["grpc.default_authority"] = options.authority
        super().__init__(
            host=endpoint.host,
            port=endpoint.port,
            username=options.user or None,
            password=options.password or None,
            timeout=timeout,
            options=channel_options,
        )
        self._credentials: grpc.ChannelCredentials | None = None
        if endpoint.tls:
            trusted, key, chain = options.tls_material()
            self._credentials = grpc.ssl_channel_credentials(trusted, key, chain)

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:  # another coroutine is connecting: wait for it
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        self._is_connecting = True
        try:
            await self._open()
        finally:
            self._is_connecting = False

    async def _open(self) -> None:
        target = f"{self._host}:{self._port}"
        options = list(self._options.items())
        if self._credentials is None:
            self.channel = grpc.aio.insecure_channel(target, options=options)
        else:
            self.channel = grpc.aio.secure_channel(target, self._credentials, options=options)
        try:
            if self._username is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                self.metadata = await self._authenticate()
        except BaseException:
            await self.channel.close()
            self._init_channel_attrs()
            raise
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(
            rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
        )
        self._connected.set()

    async def _authenticate(self) -> tuple[tuple[str, str], ...]:
        request = rpc.AuthenticateRequest(name=self._username, password=self._password)
        try:
            reply = await self.auth_stub.Authenticate(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise _client_error(exc) from exc
        return (("token", reply.token),)

    @property
    def token(self) -> object:
        """The current credentials (compared by identity to renew a token only once)."""
        return self.metadata

    async def renew_token(self) -> None:
        """A new token for the user (etcd restarted, or the token expired)."""
        self.metadata = await self._authenticate()
        if self._watcher is not None:
            self._watcher._metadata = self.metadata  # used when its stream is next set up


def _client_error(exc: grpc.aio.AioRpcError) -> Exception:
    """aetcd's exception for a failed call made outside its decorated methods."""
    kinds: dict[Any, Any] = {
        grpc.StatusCode.UNAUTHENTICATED: exceptions.UnauthenticatedError,
        grpc.StatusCode.INVALID_ARGUMENT: exceptions.UnauthenticatedError,  # wrong password
        grpc.StatusCode.UNAVAILABLE: exceptions.ConnectionFailedError,
        grpc.StatusCode.DEADLINE_EXCEEDED: exceptions.ConnectionTimeoutError,
    }
    error: Exception = kinds.get(exc.code(), exceptions.ClientError)(exc.details())
    return error
