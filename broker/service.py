"""``BrokerService``: the topic registry and what connections and the admin API share.

It owns the loaded topics and their lifecycle: loading (recovery, including the PIP-6 dedup
replay, runs exactly once per load and before any producer is admitted), unloading and deleting,
each serialized per topic name by one ``asyncio.Lock``. A loaded topic's ledger directory is held
with a ``LedgerLock`` (released on unload and shutdown), so ``magnetar repair-topic`` never cuts
files a topic is using; a load that finds the lock taken by a repair answers ServiceNotReady
(retry). A topic whose storage is damaged is refused and remembered (``damaged_topics``) until its
files change or it is unloaded. The process around it (ports, signals, shutdown order) is
``broker.server.Broker``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from broker.auth import Security
from broker.blocking import run_blocking
from broker.cluster.bundles import Bundle
from broker.cluster.fence import FenceCheck, StaleOwnershipError, install_fence
from broker.cluster.metadata import ClusterMetadata
from broker.cluster.service import ClusterService
from broker.config import BrokerConfig
from broker.connection.limits import ConnectionLimiter
from broker.errors import ServiceNotReady, TopicNotFound
from broker.metadata.partitions import FilePartitionStore, PartitionStore
from broker.metadata.policies import FilePolicyStore, PolicyStore
from broker.metadata.schemas import FileSchemaStore, SchemaStore
from broker.name_locks import NameLocks
from broker.publish.dedup import MessageDeduplication
from broker.publish.dedup_snapshot import dedup_config_from, open_ledger_for_dedup, recover_dedup
from broker.publish.idempotency_snapshot import recover_window, window_config_for
from broker.publish.idempotency_window import IdempotencyWindow, WindowConfig
from broker.storage import (
    CorruptCursorError,
    CorruptLedgerError,
    EntryCache,
    FileLayer,
    Ledger,
    LedgerConfig,
    OsFileLayer,
    Position,
)
from broker.storage.files import ensure_directory
from broker.storage.lock import LedgerLock, LockTable
from broker.storage.paths import namespace_directory, topic_directory, topic_stored_in
from broker.topics.damaged import DamagedTopics, TopicDamage
from broker.topics.non_persistent import get_non_persistent_topic
from broker.topics.policies import TopicPolicies
from broker.topics.topic import Topic, ledger_config_from
from protocol.topic_name import (
    NON_PERSISTENT,
    NamespaceName,
    TopicName,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class ClientConnection(Protocol):
    """What the service keeps of a client connection: enough to close it at shutdown."""

    def close(self) -> None: ...

    def abort(self) -> None: ...

    async def wait_closed(self) -> None: ...


class BrokerService:
    """What connections and the admin API share: config, topics, policies, schemas."""

    def __init__(self, config: BrokerConfig, metadata: ClusterMetadata | None = None) -> None:
        self.config = config
        self.data_path = config.data_path
        self.data_path.mkdir(parents=True, exist_ok=True)
        metadata_dir = self.data_path / "metadata"
        # Standalone: files under dataDir/metadata; cluster mode: etcd (docs/CLUSTER.md §8).
        self.policies: PolicyStore
        self.schemas: SchemaStore
        self.partitioned: PartitionStore
        if metadata is None:
            self.policies = FilePolicyStore(metadata_dir)
            self.schemas = FileSchemaStore(metadata_dir)
            self.partitioned = FilePartitionStore(metadata_dir)
        else:
            self.policies, self.schemas = metadata.policies, metadata.schemas
            self.partitioned = metadata.partitions
        self.security = Security(config, metadata_dir)  # authentication, authorization
        if metadata is not None:
            self.security.store.use(metadata.auth)
        #: How topics take their stored policies (retention, TTL, auto-creation, compaction).
        self.topic_policies = TopicPolicies(self.policies, self.partitioned, config)
        self.connections: set[ClientConnection] = set()
        self.connection_limiter = ConnectionLimiter(
            config.broker_max_connections, config.broker_max_connections_per_ip
        )
        self.topics: dict[str, Topic] = {}
        self.damaged = DamagedTopics()
        self._load_locks = NameLocks()  # per topic name, gone when unused
        self._topic_work: set[asyncio.Future[Any]] = set()  # see _exclusively
        self._ledger_locks: dict[str, LedgerLock] = {}
        self._lock_table = LockTable()  # one descriptor per namespace, not per topic
        self._producer_counter = 0
        # Unique across restarts: generated producer names are dedup keys (PIP-6).
        self._instance = format(int(time.time() * 1000), "x")
        self.service_url = ""
        self.web_url = ""
        self.service_url_tls = ""  # set when brokerServicePortTls / webServicePortTls serve
        self.web_url_tls = ""
        self.closing = False
        #: Test seam: the storage file layer (fault injection, simulated power loss).
        self.file_layer: FileLayer | None = None
        #: managedLedgerCacheSizeMB bounds the cache of the whole broker, as in Pulsar.
        self.entry_cache = EntryCache(config.managed_ledger_cache_size_mb * 1024 * 1024)
        #: Cluster mode (metadataStoreUrl = etcd:...): bundle ownership gates every load.
        self.cluster: ClusterService | None = None

    # ------------------------------------------------------------------ names

    def generate_producer_name(self) -> str:
        self._producer_counter += 1
        return f"{self.config.cluster_name}-{self._instance}-{self._producer_counter}"

    def check_namespace(self, topic: TopicName) -> None:
        namespace = topic.namespace_name
        if not self.policies.has_namespace(namespace):
            raise TopicNotFound(f"Tenant or namespace or topic does not exist: {namespace}")

    def partitions_of(self, topic: TopicName) -> int:
        self.check_namespace(topic)
        return 0 if topic.is_partition else self.partitioned.partitions(topic.full_name)

    def topics_of_namespace(self, namespace: NamespaceName) -> list[str]:
        """Full names of the loaded topics and of the topic folders on disk, sorted (persistent
        ones; ``broker.topics.non_persistent.non_persistent_topics_of`` lists the others)."""
        prefix = f"persistent://{namespace}/"
        names = {name for name in self.topics if name.startswith(prefix)}
        directory = namespace_directory(self.data_path, namespace)
        if directory.is_dir():
            for child in directory.iterdir():
                topic = topic_stored_in(namespace, child)
                if topic is None:
                    log.debug("%s: %s is not a topic folder, not listed", namespace, child.name)
                else:
                    names.add(topic.full_name)
        return sorted(names)

    # ------------------------------------------------------------------ topics

    def dedup_enabled_for(self, topic: TopicName) -> bool:
        return self.policies.dedup_enabled(
            topic.full_name, topic.namespace_name, self.config.broker_deduplication_enabled
        )

    async def get_topic(self, name: TopicName, *, create: bool) -> Topic:
        """The loaded topic, loading (and maybe creating) it first."""
        if self.closing:
            raise ServiceNotReady("Broker is shutting down")
        if name.domain == NON_PERSISTENT:
            self.check_namespace(name)
            return get_non_persistent_topic(self.topics, self.config, name)
        if self.cluster is not None:
            self.cluster.check_serving(name)  # ServiceNotReady unless we own its bundle
        key = name.full_name
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        await self.refuse_if_damaged(name)
        return await self._exclusively(key, lambda: self._load_unless_loaded(name, create))

    async def _load_unless_loaded(self, name: TopicName, create: bool) -> Topic:
        """``get_topic`` under the topic's load lock."""
        key = name.full_name
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        await self.refuse_if_damaged(name)  # a load we waited for may just have failed
        self.check_namespace(name)
        directory = topic_directory(self.data_path, name)
        creatable = create and self.topic_policies.auto_topic_creation_allowed(name)
        if not directory.exists() and not creatable:
            raise TopicNotFound(f"Topic {key} does not exist")
        topic = await self._load(name, directory)
        if self.closing:  # the shutdown's close_topics has run: this one would be left open
            await topic.close()
            self._release_ledger_lock(key)
            raise ServiceNotReady("Broker is shutting down")
        self.topics[key] = topic
        return topic

    async def _exclusively(self, key: str, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` under the topic's load lock, as a task of its own that its requester's
        cancellation does not stop.

        Loading, unloading and deleting run in disk threads, which cannot be stopped halfway.
        Were the lock released when a requester is cancelled (its connection closed), a second
        load could open the folder while the first one's thread still recovers it: two ledgers
        on one folder (the session fuzzer saw a temp file vanish under a recovery). So the work
        finishes and releases the lock; a load's topic stays loaded for the client's retry.
        """

        async def locked() -> T:
            async with self._load_locks.hold(key):
                return await work()

        task = asyncio.ensure_future(locked())
        self._topic_work.add(task)
        task.add_done_callback(self._topic_work_done)
        return await asyncio.shield(task)

    def _topic_work_done(self, task: asyncio.Future[Any]) -> None:
        self._topic_work.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a requester that went away may not await it

    async def refuse_if_damaged(self, name: TopicName) -> None:
        """Raise ``TopicDamaged`` if the topic is known to be damaged and its files have not
        changed since; forget the mark if they have (the next load tries afresh)."""
        damage = self.damaged.get(name.full_name)
        if damage is None:
            return
        if await run_blocking(damage.files_unchanged):
            raise damage.error()
        self.damaged.clear(name.full_name, damage)
        log.info("topic %s: its damaged files changed; loading it again", name.full_name)

    async def _load(self, name: TopicName, directory: Path) -> Topic:
        started = time.monotonic()
        dedup_on = self.dedup_enabled_for(name)
        key = name.full_name
        epoch = None if self.cluster is None else self.cluster.check_serving(name)
        try:
            window_config = window_config_for(self.config, self.policies, name)  # issue #16
            ledger, dedup, window = await run_blocking(
                self._load_sync, key, directory, dedup_on, window_config, epoch
            )
        except _Refused as refused:
            self.damaged.mark(refused.damage)
            log.error(
                "topic %s refused until repaired, nothing was dropped: %s "
                "(`magnetar repair-topic %s` shows what cutting to the valid prefix would drop)",
                key,
                refused.damage.description,
                key,
            )
            raise refused.damage.error() from refused.__cause__
        topic = Topic(name, ledger, self.config, dedup=dedup)
        if (
            self.cluster is not None
            and self.cluster.epoch_of(self.cluster.bundle_of(name)) != epoch
        ):
            await topic.abandon()  # the bundle was lost while loading: write nothing
            raise ServiceNotReady(f"Topic {key}: its bundle moved while loading; retry")
        topic.idempotency = window  # issue #16, before anything can publish
        self.topic_policies.apply_on_load(topic)  # retention, compaction threshold (admin API)
        log.info(
            "loaded topic %s in %.3f s (dedup %s)",
            name.full_name,
            time.monotonic() - started,
            "on" if dedup_on else "off",
        )
        return topic

    def _load_sync(
        self,
        key: str,
        directory: Path,
        dedup_on: bool,
        window_config: WindowConfig,
        epoch: int | None = None,
    ) -> tuple[Ledger, MessageDeduplication[Position] | None, IdempotencyWindow]:
        self._hold_ledger_lock(key, directory)
        try:
            # Cluster mode: fence the previous owner before reading anything (docs/CLUSTER.md).
            fence = None if epoch is None else self._install_fence(key, directory, epoch)
            # The epoch also names the metadata file this owner writes (storage/metadata.py).
            ledger_config = dataclasses.replace(ledger_config_from(self.config), owner_epoch=epoch)
            ledger, snapshot_damaged = open_ledger_for_dedup(
                directory, ledger_config, self.file_layer, self.entry_cache
            )
            if fence is not None:
                ledger.set_fence(fence)
        except CorruptLedgerError as exc:
            # Fingerprint the files while still holding the lock: a repair cannot slip in
            # between, so the mark never outlives the damage it describes.
            damage = TopicDamage.of(key, directory, exc)
            self._release_ledger_lock(key)
            raise _Refused(damage) from exc
        except BaseException:
            self._release_ledger_lock(key)
            raise
        try:
            dedup = (
                recover_dedup(ledger, dedup_config_from(self.config), full_replay=snapshot_damaged)
                if dedup_on
                else None
            )
            if not dedup_on and "pulsar.dedup" in ledger.cursors:
                ledger.delete_cursor("pulsar.dedup")
            window = recover_window(ledger, window_config)
        except BaseException:
            try:
                ledger.close()
            finally:
                self._release_ledger_lock(key)
            raise
        return ledger, dedup, window

    def _install_fence(self, key: str, directory: Path, epoch: int) -> FenceCheck:
        """Write our ownership epoch into the topic's fence file (worker thread)."""
        cluster = self.cluster
        assert cluster is not None
        try:
            check = install_fence(
                directory, epoch, cluster.me.broker_id, cluster.lease_valid, self.file_layer
            )
        except StaleOwnershipError as exc:
            raise ServiceNotReady(str(exc)) from exc
        check.on_fenced = cluster.fence_notifier(cluster.bundle_of(TopicName.parse(key)))
        return check

    def _hold_ledger_lock(self, key: str, directory: Path) -> None:
        """Take the directory's lock for a load (worker thread). Kept if this service already
        holds it: a topic dropped without an unload (a test's simulated crash) still owns it.
        Cluster mode takes none: ownership in etcd plus the fence file exclude other brokers,
        and a paused former owner's flock must not block the takeover."""
        if key in self._ledger_locks:
            return
        ensure_directory(self.file_layer or OsFileLayer(), directory)  # durably, as open would
        if self.cluster is not None:
            return
        lock = LedgerLock.try_acquire(directory, self._lock_table)
        if lock is None:
            raise ServiceNotReady(f"Topic {key} is being repaired (its ledger is locked); retry")
        self._ledger_locks[key] = lock

    def _release_ledger_lock(self, key: str) -> None:
        lock = self._ledger_locks.pop(key, None)
        if lock is not None:
            lock.release()

    def loaded_topic(self, name: TopicName) -> Topic | None:
        return self.topics.get(name.full_name)

    def topic_exists(self, name: TopicName) -> bool:
        return name.full_name in self.topics or topic_directory(self.data_path, name).exists()

    async def unload_topic(self, name: TopicName) -> None:
        """Close a loaded topic. Holding its load lock keeps a reconnecting client from opening
        the same ledger directory while the old instance is still closing."""
        key = name.full_name
        await self._exclusively(key, lambda: self._unload_locked(key))

    async def _unload_locked(self, key: str) -> None:
        self.damaged.clear(key)
        topic = self.topics.pop(key, None)
        try:
            if topic is not None:
                await topic.close()
        finally:
            self._release_ledger_lock(key)

    async def stop_bundle_topics(self, bundle: Bundle, graceful: bool) -> None:
        """Cluster mode: stop serving the loaded topics of ``bundle``: closed cleanly (unload),
        or, when ownership was lost, abandoned without writing a byte (another broker may
        already own the files), their producers and consumers told to look up again."""
        for key, topic in list(self.topics.items()):
            if self.cluster is None or self.cluster.bundle_of(topic.name) != bundle:
                continue
            if graceful:
                await self.unload_topic(topic.name)
                continue
            async with self._load_locks.hold(key):
                if self.topics.get(key) is not topic:
                    continue
                del self.topics[key]
                await topic.abandon()
                for producer in list(topic.producers.producers):
                    producer.sink.close_producer(producer)
                for sub in list(topic.subscriptions.values()):
                    sub.close()  # the cursors are abandoned: nothing is persisted

    async def delete_topic(self, name: TopicName) -> None:
        """Unload, then remove the topic's files, all under its load lock: a client that
        reconnects meanwhile waits, then finds no topic (or creates a fresh one), instead of
        loading the ledger while its files are being removed."""
        key = name.full_name
        await self._exclusively(key, lambda: self._delete_locked(name))

    async def _delete_locked(self, name: TopicName) -> None:
        key = name.full_name
        await self._unload_locked(key)
        directory = topic_directory(self.data_path, name)
        await run_blocking(self._delete_ledger, key, directory)
        await self.schemas.delete(key)

    def _delete_ledger(self, key: str, directory: Path) -> None:
        """Remove a topic's storage (disk thread), holding its ledger lock so that a repair
        cannot be working on it meanwhile."""
        if not directory.exists():
            return
        self._hold_ledger_lock(key, directory)
        try:
            _delete_ledger(directory, ledger_config_from(self.config))
        finally:
            self._release_ledger_lock(key)

    async def close_topics(self) -> None:
        topics = list(self.topics.values())
        self.topics.clear()
        try:
            results = await asyncio.gather(*(t.close() for t in topics), return_exceptions=True)
        finally:
            for key in list(self._ledger_locks):
                self._release_ledger_lock(key)
        for topic, result in zip(topics, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing %s failed: %s", topic.name.full_name, result)


class _Refused(Exception):
    """A load found the topic's storage damaged (``damage``, taken under the ledger lock)."""

    def __init__(self, damage: TopicDamage) -> None:
        super().__init__(damage.description)
        self.damage = damage


def _delete_ledger(directory: Path, config: LedgerConfig) -> None:
    """Delete a topic's ledger; a damaged one too (deleting is the operator's explicit wish to
    drop everything, so damage is no reason to keep the files)."""
    try:
        ledger = Ledger.open(directory, config)
    except (CorruptLedgerError, CorruptCursorError) as exc:
        log.warning("deleting damaged topic storage %s (%s)", directory, exc)
        shutil.rmtree(directory)
        OsFileLayer().fsync_dir(directory.parent)
        return
    ledger.delete()
