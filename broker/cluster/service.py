"""``ClusterService``: membership, bundle ownership and lookups of one broker in cluster mode.

Started by ``Broker.start`` when ``metadataStoreUrl`` names etcd (docs/CLUSTER.md). It

* registers the broker under a lease (``metadataStoreSessionTimeoutMillis``) and refreshes it
  every third of the TTL; ``lease_valid`` is the conservative local view: the time the last
  successful refresh was *sent* plus the TTL, minus a margin. Past it the broker acts as if it
  owned nothing (it stops serving and acknowledging) even before etcd says so;
* acquires bundles on lookups (Pulsar: the candidate chosen by the placement, or this broker
  when the lookup is ``authoritative``) with a create-if-absent transaction on a lease-backed
  key; the key's create revision is the ownership epoch written into each topic's fence file;
* drops bundles it no longer owns (lease lost, key gone or replaced) by abandoning their topics
  without writing anything, and releases bundles on ``unload`` / shutdown after closing them;
* splits a bundle it owns (``split``) for the load balancer (``balancer.py``), which also
  publishes the load reports that ``_candidate`` places bundles by.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker.cluster.balancer import BalancerSettings, LoadBalancer
from broker.cluster.boundaries import NamespaceBoundaries
from broker.cluster.bundles import Bundle, parse_bundle_range, split_at
from broker.cluster.load import BrokerLoad, LoadedTopic
from broker.cluster.membership import BrokerInfo, Keys
from broker.cluster.placement import Preallocations, choose_broker
from broker.cluster.split import SplitLimits
from broker.cluster.store import Entry, EtcdStore, etcd_store_for
from broker.errors import ServiceNotReady
from protocol.topic_name import TopicName

if TYPE_CHECKING:
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)

#: Called to stop serving a bundle's topics: ``graceful`` (unload: flush and persist) or not
#: (ownership lost: another broker may be writing already, so nothing may be written).
TopicsStopper = Callable[[Bundle, bool], Awaitable[None]]


class BundleSplitError(ServiceNotReady):
    """The bundle being acquired was split meanwhile (Pulsar: ``ServiceUnitNotReady``)."""


@dataclass(frozen=True, slots=True)
class LookupAnswer:
    """``Connect`` to ``broker`` (``redirect`` False) or ask it again (``redirect`` True)."""

    broker: BrokerInfo
    redirect: bool
    authoritative: bool


@dataclass(slots=True)
class _Owned:
    epoch: int
    unloading: bool = False


class ClusterService:
    """One broker's view and actions on the cluster's etcd state."""

    def __init__(
        self,
        store: EtcdStore,
        me: BrokerInfo,
        cluster_name: str,
        bundles_per_namespace: int,
        ttl_seconds: int,
        stop_topics: TopicsStopper,
    ) -> None:
        self.store = store
        self.me = me
        self.keys = Keys(cluster_name)
        self.boundaries = NamespaceBoundaries(store, self.keys.boundaries, bundles_per_namespace)
        self.ttl = ttl_seconds
        self._stop_topics = stop_topics
        self._lease_id = 0
        self._deadline = 0.0  # time.monotonic() until which our lease surely holds
        self._owned: dict[Bundle, _Owned] = {}
        self._claims: dict[Bundle, asyncio.Lock] = {}
        self._preallocated = Preallocations()
        #: Started after us, closed before we release our bundles (``balancer.py``).
        self.balancer: LoadBalancer | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Task[None]] = set()

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.store.connect()
        await self.boundaries.start()
        await self._register()
        self._task = asyncio.create_task(self._keep_alive_loop(), name="cluster lease")
        log.info("cluster mode: registered %s (lease TTL %d s)", self.me.broker_id, self.ttl)

    async def close(self) -> None:
        """Release every bundle (topics closed cleanly first), then the lease."""
        self._stopping = True  # no new bundle; the lease stays valid for the clean closes
        if self.balancer is not None:
            await self.balancer.close()
        for bundle in list(self._owned):
            with contextlib.suppress(Exception):
                await self.unload(bundle)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        still_valid = self.lease_valid()
        self._closing = True
        if still_valid:
            with contextlib.suppress(Exception):
                await self.store.revoke_lease(self._lease_id)
        with contextlib.suppress(Exception):
            await self.boundaries.close()
        with contextlib.suppress(Exception):
            await self.store.close()

    async def _register(self) -> None:
        sent = time.monotonic()
        self._lease_id = await self.store.grant_lease(self.ttl)
        self._deadline = sent + self.ttl - self._margin()
        await self.store.put(self.keys.broker(self.me.broker_id), self.me.encode(), self._lease_id)
        await self._drop_keys_of_earlier_incarnations()

    async def _drop_keys_of_earlier_incarnations(self) -> None:
        """Delete ownership keys left by a dead earlier process with our broker id: it cannot
        be alive, as we now hold its listening ports. Its bundles are then placed at once
        instead of after its lease expires (the fence files protect either way)."""
        for entry in await self.store.get_prefix(self.keys.owners):
            info = BrokerInfo.decode(entry.value)
            if info.broker_id == self.me.broker_id and entry.lease != self._lease_id:
                await self.store.delete_if_created_at(entry.key, entry.create_revision)
                log.info("cluster: dropped %s of an earlier incarnation", entry.key)

    def _margin(self) -> float:
        # Clocks of etcd and the broker run at slightly different rates: stop a bit early.
        return min(1.0, self.ttl * 0.2)

    async def _keep_alive_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self._refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # etcd unreachable: keep serving while the lease holds
                log.warning("cluster: refreshing the lease failed: %s", exc)
            if not self.lease_valid() and self._owned:
                await self._lose(list(self._owned), "the lease may have expired")

    async def _refresh(self) -> None:
        sent = time.monotonic()
        remaining = await self.store.keep_alive(self._lease_id)
        if remaining <= 0:
            await self._lose(list(self._owned), "the lease expired")
            await self._register()
            log.warning("cluster: lease had expired; registered again")
            return
        if sent + remaining - self._margin() > self._deadline:
            self._deadline = sent + remaining - self._margin()
        await self._verify_owned()

    async def _verify_owned(self) -> None:
        """Drop bundles whose key is gone or belongs to another incarnation (deleted by hand,
        or re-created by another broker after our lease lapsed)."""
        entries = {e.key: e for e in await self.store.get_prefix(self.keys.owners)}
        lost = []
        for bundle, owned in self._owned.items():
            entry = entries.get(self.keys.owner(bundle))
            if not owned.unloading and (entry is None or entry.create_revision != owned.epoch):
                lost.append(bundle)
        if lost:
            await self._lose(lost, "its ownership key is gone")
        # Keys under our lease for bundles we do not serve: left when we dropped a bundle while
        # etcd was unreachable (the delete failed) and the lease survived (etcd extends leases
        # when it restarts). They would send clients to a broker that refuses them.
        ours = {self.keys.owner(b) for b in self._owned}
        ours |= {self.keys.owner(b) for b, lock in self._claims.items() if lock.locked()}
        for key, entry in entries.items():
            if entry.lease == self._lease_id and key not in ours:
                await self.store.delete_if_created_at(key, entry.create_revision)
                log.info("cluster: released orphaned ownership key %s", key)

    async def _lose(self, bundles: list[Bundle], why: str) -> None:
        for bundle in bundles:
            owned = self._owned.pop(bundle, None)
            if owned is None:
                continue
            log.warning("cluster: lost bundle %s (%s); its topics stop", bundle.name, why)
            await self._stop_topics(bundle, False)
            # If our lease still holds in etcd (we only feared it lapsed), the key would keep
            # sending clients to a broker that refuses them: give the bundle up for good.
            with contextlib.suppress(Exception):
                await self.store.delete_if_created_at(self.keys.owner(bundle), owned.epoch)

    def fence_notifier(self, bundle: Bundle) -> Callable[[str], None]:
        """For ``FenceCheck.on_fenced`` (called in a disk thread): drop ``bundle`` at once."""
        loop = self._loop
        assert loop is not None

        def drop(why: str) -> None:
            task = loop.create_task(self._lose([bundle], f"fenced: {why}"))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

        def notify(why: str) -> None:
            loop.call_soon_threadsafe(drop, why)

        return notify

    # -- ownership -----------------------------------------------------------------------------

    def lease_valid(self) -> bool:
        return not self._closing and time.monotonic() < self._deadline

    def bundle_of(self, topic: TopicName) -> Bundle:
        return self.boundaries.bundle_of(topic)

    def epoch_of(self, bundle: Bundle) -> int | None:
        """Our ownership epoch of ``bundle`` if we own it and may serve it now."""
        owned = self._owned.get(bundle)
        if owned is None or owned.unloading or not self.lease_valid():
            return None
        return owned.epoch

    def owned_bundles(self) -> dict[Bundle, int]:
        return {b: o.epoch for b, o in self._owned.items() if not o.unloading}

    def check_serving(self, topic: TopicName) -> int:
        """The epoch under which ``topic`` may be served here; ServiceNotReady otherwise
        (Pulsar answers ``ServiceUnitNotReady`` for a bundle it does not own)."""
        bundle = self.bundle_of(topic)
        epoch = self.epoch_of(bundle)
        if epoch is None:
            raise ServiceNotReady(
                f"Namespace bundle {bundle.name} is not served by {self.me.broker_id}"
            )
        return epoch

    async def owner_of(self, bundle: Bundle) -> tuple[BrokerInfo, int] | None:
        entry = await self.store.get(self.keys.owner(bundle))
        return None if entry is None else (BrokerInfo.decode(entry.value), entry.create_revision)

    async def acquire(self, bundle: Bundle) -> tuple[BrokerInfo, int]:
        """Own ``bundle`` unless another broker already does; the owner and its epoch."""
        async with self._claims.setdefault(bundle, asyncio.Lock()):
            epoch = self.epoch_of(bundle)
            if epoch is not None:
                return self.me, epoch
            if not self.lease_valid() or self._stopping:
                raise ServiceNotReady("this broker's cluster lease is not valid")
            key = self.keys.owner(bundle)
            await self._create_if_current(key, bundle)
            entry = await self.store.get(key)
            if entry is None:
                raise ServiceNotReady(f"bundle {bundle.name}: ownership vanished; retry")
            owner, epoch = BrokerInfo.decode(entry.value), entry.create_revision
            # Ours only under this lease: a key of an earlier incarnation of this broker (same
            # id, killed and restarted) is not, and goes when its lease expires.
            mine = entry.lease == self._lease_id and self.lease_valid()
            if mine and bundle not in self._owned:
                self._owned[bundle] = _Owned(epoch)
                log.info("cluster: acquired bundle %s at epoch %d", bundle.name, epoch)
                with contextlib.suppress(Exception):  # an unload's or split's hint is done
                    await self.store.delete(self.keys.assignment(bundle))
            return owner, epoch

    async def _create_if_current(self, key: str, bundle: Bundle) -> None:
        """Create the ownership key unless the namespace's boundaries changed since our mirror
        read them (a split elsewhere): a range that no longer exists is never owned."""
        if not self.boundaries.is_current(bundle):
            raise BundleSplitError(f"bundle {bundle.name} was split; look the topic up again")
        guard = self.boundaries.key(bundle.namespace)
        revision = self.boundaries.revision(bundle.namespace)
        created = await self.store.create_guarded(
            key, self.me.encode(), self._lease_id, guard, revision
        )
        if not created and await self.store.get(key) is None:
            raise BundleSplitError(f"bundle {bundle.name} was split; look the topic up again")

    async def unload(self, bundle: Bundle, *, move_to: str | None = None) -> bool:
        """Close the bundle's topics cleanly, then give up its ownership. False if not owned.

        ``move_to``: a broker id that the next lookups place the bundle on (Pulsar's
        ``destinationBroker``); ``""`` picks another live broker if there is one. The hint is a
        key under our lease, deleted by the broker that acquires the bundle."""
        owned = self._owned.get(bundle)
        if owned is None or owned.unloading:
            return False
        owned.unloading = True  # no new topic of it is loaded meanwhile
        if move_to is not None:
            target = move_to or await self._candidate(bundle, exclude=self.me.broker_id)
            if target:
                key = self.keys.assignment(bundle)
                await self.store.put(key, target.encode(), self._lease_id)
        try:
            await self._stop_topics(bundle, True)
        finally:
            self._owned.pop(bundle, None)
            with contextlib.suppress(Exception):
                await self.store.delete_if_created_at(self.keys.owner(bundle), owned.epoch)
        log.info("cluster: unloaded bundle %s", bundle.name)
        return True

    async def split(
        self, bundle: Bundle, points: list[int], targets: list[str] | None = None
    ) -> list[Bundle] | None:
        """Split ``bundle`` (ours) at ``points``: close its topics cleanly, leave a hint naming
        the broker each piece goes to (``targets``; None: this one), write the new boundaries,
        release it. The pieces are acquired by the next lookups, as any unowned bundle. None
        if we do not own it (any more)."""
        owned = self._owned.get(bundle)
        if owned is None or owned.unloading or not self.lease_valid():
            return None
        pieces = split_at(bundle, points)
        targets = targets or [self.me.broker_id] * len(pieces)
        owned.unloading = True  # no topic of it is loaded meanwhile
        try:
            await self._stop_topics(bundle, True)
            for piece, target in zip(pieces, targets, strict=True):
                await self.store.put(self.keys.assignment(piece), target.encode(), self._lease_id)
            await self.boundaries.split(bundle, points)
        except BaseException:
            owned.unloading = False  # still ours, under the old boundaries
            raise
        self._owned.pop(bundle, None)
        with contextlib.suppress(Exception):
            await self.store.delete_if_created_at(self.keys.owner(bundle), owned.epoch)
        log.info(
            "cluster: split bundle %s into %s (to %s)",
            bundle.name,
            ", ".join(p.range_name for p in pieces),
            ", ".join(targets),
        )
        return pieces

    # -- lookup --------------------------------------------------------------------------------

    async def lookup(self, topic: TopicName, authoritative: bool) -> LookupAnswer:
        """Pulsar's lookup: the owner (Connect), else the placement's candidate (Redirect,
        authoritative), else, when the candidate is us or the request is authoritative, we
        acquire the bundle and answer Connect. A split that our watch has not delivered yet
        is read from etcd and the lookup made again on the new ranges."""
        for _ in range(3):
            try:
                return await self._lookup(topic, authoritative)
            except BundleSplitError:
                await self.boundaries.refresh(str(topic.namespace_name))
        return await self._lookup(topic, authoritative)

    async def _lookup(self, topic: TopicName, authoritative: bool) -> LookupAnswer:
        bundle = self.bundle_of(topic)
        if self.epoch_of(bundle) is not None:
            return LookupAnswer(self.me, redirect=False, authoritative=True)
        found = await self.owner_of(bundle)
        if found is not None:
            return LookupAnswer(found[0], redirect=False, authoritative=True)
        if not authoritative:
            candidate = await self._candidate(bundle)
            if candidate and candidate != self.me.broker_id:
                info = await self.store.get(self.keys.broker(candidate))
                if info is not None:
                    target = BrokerInfo.decode(info.value)
                    return LookupAnswer(target, redirect=True, authoritative=True)
        owner, _ = await self.acquire(bundle)
        return LookupAnswer(owner, redirect=False, authoritative=True)

    async def _candidate(self, bundle: Bundle, exclude: str = "") -> str:
        """The broker id the placement picks for ``bundle`` ("" if none is alive): the one an
        unload named, if it is alive, else the least loaded (``placement.py``)."""
        brokers = [b for b in await self.brokers() if b.broker_id != exclude]
        alive = {b.broker_id for b in brokers}
        hint = await self.store.get(self.keys.assignment(bundle))
        if hint is not None and hint.value.decode() in alive:
            return hint.value.decode()
        owned = await self.store.get_prefix(self.keys.owners)
        owners = [BrokerInfo.decode(entry.value).broker_id for entry in owned]
        reports = await self.load_reports()
        # No await from here on: concurrent lookups see each other's preallocations.
        self._preallocated.forget_settled(map(self._bundle_of_key, owned), time.monotonic())
        earlier = self._preallocated.candidate(bundle)
        if earlier in alive:
            return earlier
        rates = {r.broker_id: r.msg_rate for r in reports.values()}
        for broker_id, rate in self._preallocated.rates().items():
            rates[broker_id] = rates.get(broker_id, 0.0) + rate
        chosen = choose_broker(bundle, brokers, owners + self._preallocated.loads(), rates)
        if chosen is None:
            return ""
        # Its rate as last reported (by a former owner), counted until the candidate owns it.
        expected = max(
            (r.bundles[bundle.name].msg_rate for r in reports.values() if bundle.name in r.bundles),
            default=0.0,
        )
        self._preallocated.place(bundle, chosen.broker_id, time.monotonic(), expected)
        return chosen.broker_id

    async def bundle_owners(self) -> dict[Bundle, str]:
        """Every owned bundle and its owner's broker id, as etcd has them."""
        owners = {}
        for entry in await self.store.get_prefix(self.keys.owners):
            with contextlib.suppress(ValueError, KeyError):
                owners[self._bundle_of_key(entry)] = BrokerInfo.decode(entry.value).broker_id
        return owners

    async def load_reports(self) -> dict[str, BrokerLoad]:
        """The live brokers' latest load reports, by broker id."""
        reports = {}
        for entry in await self.store.get_prefix(self.keys.load_reports):
            with contextlib.suppress(ValueError, KeyError):
                report = BrokerLoad.decode(entry.value)
                reports[report.broker_id] = report
        return reports

    async def publish_load(self, report: BrokerLoad) -> None:
        await self.store.put(
            self.keys.load_report(self.me.broker_id), report.encode(), self._lease_id
        )

    def _bundle_of_key(self, entry: Entry) -> Bundle:
        namespace, _, range_name = entry.key.removeprefix(self.keys.owners).rpartition("/")
        return parse_bundle_range(namespace, range_name)

    async def brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo.decode(e.value) for e in await self.store.get_prefix(self.keys.brokers)]


class ClusterMember(Protocol):
    """What joining needs of the local broker (``broker.service.BrokerService``): the URLs it
    advertises, and how to stop serving a bundle's topics when the bundle goes elsewhere."""

    service_url: str
    service_url_tls: str
    web_url: str
    web_url_tls: str

    @property
    def topics(self) -> Mapping[str, LoadedTopic]: ...

    async def stop_bundle_topics(self, bundle: Bundle, graceful: bool) -> None: ...


async def start_cluster(config: BrokerConfig, service: ClusterMember) -> ClusterService:
    """Join the cluster named by ``config.metadata_store_url`` as ``service``'s broker."""
    web = service.web_url or service.web_url_tls
    port = web.rsplit(":", 1)[-1] if web else service.service_url.rsplit(":", 1)[-1]
    me = BrokerInfo(
        broker_id=f"{config.advertised_address}:{port}",
        service_url=service.service_url,
        service_url_tls=service.service_url_tls,
        web_url=service.web_url,
        web_url_tls=service.web_url_tls,
    )
    ttl = max(1, round(config.metadata_store_session_timeout_millis / 1000))
    store = etcd_store_for(config)
    cluster = ClusterService(
        store,
        me,
        config.cluster_name,
        config.default_number_of_namespace_bundles,
        ttl,
        service.stop_bundle_topics,
    )
    await cluster.start()
    cluster.balancer = LoadBalancer(
        cluster, lambda: list(service.topics.values()), balancer_settings(config)
    )
    cluster.balancer.start()
    return cluster


def balancer_settings(config: BrokerConfig) -> BalancerSettings:
    """The ``loadBalancer*`` keys, in seconds."""
    return BalancerSettings(
        report_interval=config.load_balancer_report_update_min_interval_millis / 1000,
        shedding_interval=config.load_balancer_shedding_interval_minutes * 60,
        grace_period=config.load_balancer_shedding_grace_period_minutes * 60,
        threshold_percent=config.load_balancer_broker_threshold_shedder_percentage,
        history_weight=config.load_balancer_history_resource_percentage,
        shedding=config.load_balancer_enabled and config.load_balancer_shedding_enabled,
        auto_split=config.load_balancer_enabled and config.load_balancer_auto_bundle_split_enabled,
        unload_split_bundles=config.load_balancer_auto_unload_split_bundles_enabled,
        limits=SplitLimits(
            max_topics=config.load_balancer_namespace_bundle_max_topics,
            max_msg_rate=config.load_balancer_namespace_bundle_max_msg_rate,
            max_bandwidth_mbytes=config.load_balancer_namespace_bundle_max_bandwidth_mbytes,
            max_bundles=config.load_balancer_namespace_maximum_bundles,
            algorithm=config.default_namespace_bundle_split_algorithm,
        ),
    )
