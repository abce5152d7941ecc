"""The sim service and the watcher over a real NATS and PostgreSQL, the watcher watching the sim's
Kubernetes API: a small scenario becomes the expected facts in the log, and a watcher killed
mid-scenario and started again duplicates none."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from services.sim.inprocess import InProcessCluster
from services.sim.service import SimService
from services.watcher.facts import WATCHER_FACTS
from services.watcher.service import WatcherService
from shared.api.scenario import parse_scenario
from shared.clock import ManualClock
from shared.ports.cloud import InsufficientCapacityError
from shared.ports.cluster import EvictionRefused
from shared.store.eventstore import EventStore
from tests.factories import scenario_doc, startup_tainted_pool
from tests.kube_api import LocalApi
from tests.sim_callers import AnyCaller, provisioned

pytestmark = pytest.mark.timeout(90)
START = datetime(2026, 11, 23, 9, tzinfo=UTC)
SCENARIO = scenario_doc(
    "small",
    cloud={
        "instanceTypes": 60,
        "launchLatency": "30s",
        "registrationLatency": "10s",
        "insufficientCapacity": [{"capacityType": "spot", "from": "0s", "to": "1h"}],
    },
    nodePools=[startup_tainted_pool()],
    workloads=[{"name": "web", "replicas": 3, "requests": {"cpu": "1"}, "pdb": {"minAvailable": 3}}],
    timeline=[{"at": "5m", "scale": {"workload": "web", "replicas": 5}}],
)
LAUNCH = {
    "nodeclaim": "general-a",
    "nodepool": "general",
    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
    "requests": {"cpu": "6"},
    "labels": {"karpenter.sh/nodepool": "general"},
    "startupTaints": [{"key": "agent-not-ready", "effect": "NoExecute"}],
}


async def facts(store: EventStore) -> list[tuple[str, dict]]:
    return [fact async for page in store.read_types(WATCHER_FACTS) for fact in page]


async def eventually(check, timeout: float = 20.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def serving(sim: SimService) -> None:
    """Until the sim's Kubernetes API listens (it starts once the journal is read)."""
    while sim.api_url is None:
        await asyncio.sleep(0.05)


class Running:
    """A service's run() as a task, stopped on exit; `killed` cancels it mid-work instead (what
    a SIGKILL leaves: nothing after the cancellation point runs, no clean shutdown)."""

    def __init__(self, service, killed: bool = False) -> None:
        self.service, self.stopping, self.killed = service, asyncio.Event(), killed

    async def __aenter__(self):
        self.task = asyncio.create_task(self.service.run(self.stopping))
        return self.service

    async def __aexit__(self, *exc) -> None:
        if self.killed:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            await self.service.shell.stop()  # frees the port; a dead process would free it too
            return
        self.stopping.set()
        await asyncio.wait_for(self.task, 15)


def identities(log: list[tuple[str, dict]]) -> Counter:
    keys = {"PodPending": "uid", "PodBound": "uid", "PodDeleted": "uid", "NodeRegistered": "provider_id"}
    return Counter(
        (kind, data.get(keys.get(kind, "")) or data.get("node") or data.get("resource_version")) for kind, data in log
    )


async def test_a_scenario_becomes_facts_and_a_restarted_watcher_duplicates_none(store, nats_server_url, jetstream):
    clock, api = ManualClock(START), LocalApi()
    sim = SimService(parse_scenario(SCENARIO), clock, nats_server_url, api=api.options)
    await provisioned(nats_server_url)
    client = await AnyCaller.connect(nats_server_url)
    try:
        async with Running(sim):
            await serving(sim)
            watching = await api.connect(sim, "watcher", clock)
            terminating = await api.connect(sim, "termination", clock)
            watcher = WatcherService(store, watching, clock, nats_server_url)
            async with Running(watcher, killed=True):
                await eventually(lambda: _count(store, "PodPending", 3))
                with pytest.raises(InsufficientCapacityError):
                    spot_only = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]
                    await client.create({**LAUNCH, "requirements": spot_only})  # spot is short all hour
                instance = await client.create(LAUNCH)
                assert instance["capacityType"] == "on-demand" and instance["nodeclaim"] == "general-a"
                clock.advance(timedelta(seconds=45))
                await eventually(lambda: _count(store, "PodBound", 3))
                await eventually(lambda: _count(store, "NodeInitialized", 1))
                with pytest.raises(EvictionRefused):  # minAvailable 3 of 3
                    await terminating.evict(f"default/{next(iter(sim.world.cluster.pods)).split('/')[1]}")
            # the watcher is down: the workload grows, a pod goes, the world moves on
            clock.advance(timedelta(minutes=5))
            await asyncio.sleep(0.3)
            await terminating.delete_pod(next(k for k, p in sim.world.cluster.pods.items() if p.node_name))
            clock.advance(timedelta(seconds=1))
            await asyncio.sleep(0.3)
            again = WatcherService(store, watching, clock, nats_server_url)
            async with Running(again):
                await eventually(lambda: _count(store, "PodDeleted", 1))
                await eventually(lambda: _ready(again))
            log = await facts(store)
            await watching.close()
            await terminating.close()
    finally:
        await client.close()
    kinds = Counter(kind for kind, _ in log)
    assert kinds["NodePoolApplied"] == 1 and kinds["PodDisruptionBudgetApplied"] == 1
    assert kinds["NodeRegistered"] == kinds["NodeInitialized"] == kinds["PodDeleted"] == 1
    bound = {data["uid"]: data["node"] for kind, data in log if kind == "PodBound"}
    pending = {data["uid"] for kind, data in log if kind == "PodPending"}
    for pod in sim.world.cluster.pods.values():  # the log tells the world as it is
        assert (bound.get(pod.uid) == pod.node_name) if pod.node_name else (pod.uid in pending)
    assert len(pending) == 3 and len(bound) == 6  # three pending at first; six pods ever bound, three while it was down
    duplicated = {key: n for key, n in identities(log).items() if n > 1}
    assert duplicated == {}
    applied = next(data for kind, data in log if kind == "NodePoolApplied")
    assert applied["drift_hash"] and (await store.counters())["general"].spec is not None
    conditions = {c["type"]: c["status"] for c in sim.world.cluster.nodepools["general"]["status"]["conditions"]}
    assert conditions["ValidationSucceeded"] == conditions["Ready"] == "True"  # written through the API


async def _count(store: EventStore, kind: str, n: int) -> bool:
    return sum(1 for k, _ in await facts(store) if k == kind) >= n


async def _ready(service: WatcherService) -> bool:
    return service.synced and not await service.shell.not_ready()


async def test_a_broken_watch_makes_the_watcher_list_again_and_lose_nothing(store, nats_server_url):
    from services.sim.world import World

    clock = ManualClock(START)
    world = World(parse_scenario(SCENARIO))
    world.advance(START)
    cluster = InProcessCluster(world, fail_after=2)
    watcher = WatcherService(store, cluster, clock, nats_server_url)
    async with Running(watcher):
        await eventually(lambda: _count(store, "PodPending", 3))
        world.advance(START + timedelta(minutes=5))  # scaled to 5: two more pending pods, through the watch
        await eventually(lambda: _count(store, "PodPending", 5))
        assert cluster.lists >= 2  # it listed again after the watch broke
        await eventually(lambda: _ready(watcher))
    assert identities(await facts(store)) == Counter({key: 1 for key in identities(await facts(store))})


async def test_a_fact_recorded_twice_is_in_the_log_once(store, nats_server_url):
    from services.sim.world import World
    from services.watcher.facts import Facts

    world = World(parse_scenario(SCENARIO))
    world.advance(START)
    reported = [f for e in world.cluster.changes_since(0) for f in Facts().observe(e)]
    watcher = WatcherService(store, InProcessCluster(world), ManualClock(START), nats_server_url)
    await watcher.record(reported)
    await watcher.record(reported)  # a watcher that died after appending and reports them again
    log = await facts(store)
    assert len(log) == len(reported) and identities(log) == Counter({key: 1 for key in identities(log)})


ANTI_WEB = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}
WITH_DAEMONSET = scenario_doc(
    "daemonsets",
    cloud={"instanceTypes": 60, "launchLatency": "30s", "registrationLatency": "10s"},
    nodePools=[startup_tainted_pool()],
    daemonSets=[
        {
            "name": "node-exporter",
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "tolerations": [{"operator": "Exists"}],
        }
    ],
    workloads=[{"name": "db", "replicas": 1, "requests": {"cpu": "1"}, "affinity": ANTI_WEB}],
)


async def test_a_scenarios_daemonset_and_a_bound_pods_anti_affinity_reach_the_log(store, nats_server_url, jetstream):
    clock, api = ManualClock(START), LocalApi()
    sim = SimService(parse_scenario(WITH_DAEMONSET), clock, nats_server_url, api=api.options)
    await provisioned(nats_server_url)
    client = await AnyCaller.connect(nats_server_url)
    try:
        async with Running(sim):
            await serving(sim)
            watching = await api.connect(sim, "watcher", clock)
            watcher = WatcherService(store, watching, clock, nats_server_url)
            async with Running(watcher):
                await eventually(lambda: _count(store, "DaemonSetApplied", 1))
                await client.create(LAUNCH)
                clock.advance(timedelta(seconds=45))
                await eventually(lambda: _count(store, "PodBound", 2))  # db-0 and the exporter's pod
            log = await facts(store)
            await watching.close()
    finally:
        await client.close()
    (daemonset,) = [data for kind, data in log if kind == "DaemonSetApplied"]
    assert {k: v for k, v in daemonset.items() if k != "resource_version"} == {
        "namespace": "default",
        "name": "node-exporter",
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "node_selector": {},
        "tolerations": [{"operator": "Exists"}],
    }
    assert daemonset["resource_version"] >= 1
    bound = {data["name"]: data for kind, data in log if kind == "PodBound"}
    (db,) = [data for name, data in bound.items() if name.startswith("db-")]  # a Deployment's generated name
    assert "node-exporter-general-a" in bound and len(bound) == 2
    assert db["affinity"] == ANTI_WEB and db["node"] == "general-a"
    assert "affinity" not in bound["node-exporter-general-a"]  # no affinity: the field is left out
