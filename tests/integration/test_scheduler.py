"""The scheduler with the sim and the watcher over a real NATS and PostgreSQL: a burst of pods
ends with every pod running and the audit clean; a pool's node limit holds exactly."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from services.cli.eventlog import audit_database
from services.scheduler.service import SchedulerService
from services.sim.service import SimService
from services.watcher.service import WatcherService
from shared.adapters.sim import SimClient
from shared.api.scenario import parse_scenario
from shared.clock import AcceleratedClock
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc

pytestmark = pytest.mark.timeout(180)
START = datetime(2026, 11, 23, 9, tzinfo=UTC)


def burst(replicas: int, limits: dict | None = None) -> dict:
    pool = nodepool_doc(**{"metadata.name": "burst"})
    pool["spec"]["template"]["spec"]["requirements"] = [
        {"key": "sim.nodewright.dev/instance-cpu", "operator": "In", "values": ["4", "8", "16"]}
    ]
    pool["spec"]["template"]["metadata"] = {"labels": {"team": "a"}}
    if limits:
        pool["spec"]["limits"] = limits
    return scenario_doc(
        "burst",
        duration="2h",
        cloud={"instanceTypes": 120, "launchLatency": "30s", "registrationLatency": "20s"},
        nodePools=[pool],
        workloads=[{"name": "web", "replicas": 0, "requests": {"cpu": "1", "memory": "1Gi"}}],
        timeline=[{"at": "1m", "scale": {"workload": "web", "replicas": replicas}}],
    )


async def play(document: dict, migrated_url: str, nats_url: str, store, until, replicas: int = 1) -> SimService:
    clock = AcceleratedClock(START, speed=60)
    sim = SimService(parse_scenario(document), clock, nats_url)
    client = await SimClient.connect(nats_url)
    stopping = asyncio.Event()
    watcher = WatcherService(store, client, clock, nats_url)
    schedulers = [SchedulerService(store, client, clock, nats_url) for _ in range(replicas)]
    sim_task = asyncio.create_task(sim.run(stopping))
    await asyncio.sleep(0.5)
    tasks = [asyncio.create_task(watcher.run(stopping)), *(asyncio.create_task(s.run(stopping)) for s in schedulers)]
    try:
        deadline = time.monotonic() + 120
        while not until(sim):
            assert time.monotonic() < deadline, "timed out"
            assert not any(t.done() for t in [sim_task, *tasks]), [t.exception() for t in tasks if t.done()]
            await asyncio.sleep(0.2)
    finally:
        stopping.set()
        await asyncio.wait_for(asyncio.gather(sim_task, *tasks), 30)
        await client.close()
    return sim


def pods_running(sim: SimService, n: int) -> bool:
    pods = [p for p in sim.world.cluster.pods.values() if p.owner_name == "web"]
    return len(pods) == n and all(p.node_name for p in pods)


async def test_a_200_pod_burst_ends_with_every_pod_running_and_the_audit_clean(store, migrated_url, nats_server_url):
    sim = await play(burst(200), migrated_url, nats_server_url, store, lambda s: pods_running(s, 200))
    nodes = sim.world.cluster.nodes.values()
    assert nodes and all(n.labels["karpenter.sh/nodepool"] == "burst" and n.labels["team"] == "a" for n in nodes)
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches
    assert result.replay.launches == len(sim.world.cloud.instances)
    counters = (await store.counters())["burst"]
    assert counters.nodes == len(sim.world.cloud.running()) and counters.in_flight == 0


async def test_a_nodes_limit_holds_exactly_under_a_burst(store, migrated_url, nats_server_url):
    def limited(s: SimService) -> bool:
        return len(s.world.cloud.running()) >= 3 and all(
            s.world.cluster.nodes.get(i.request.nodeclaim) for i in s.world.cloud.running()
        )

    sim = await play(burst(200, {"nodes": "3"}), migrated_url, nats_server_url, store, limited)
    await asyncio.sleep(1.0)
    assert len(sim.world.cloud.instances) == 3  # never a fourth, however many pods wait
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match


async def test_two_scheduler_replicas_never_give_a_pod_two_claims(store, migrated_url, nats_server_url):
    sim = await play(burst(120), migrated_url, nats_server_url, store, lambda s: pods_running(s, 120), replicas=2)
    created = [data async for page in store.read_types(["NodeClaimCreated"]) for _, data in page]
    pods = [pod for data in created for pod in data["pods"]]
    assert len(pods) == len(set(pods)) and len(created) == len(sim.world.cloud.instances)
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match
