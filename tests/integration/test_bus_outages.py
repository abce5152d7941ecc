"""Servers that go away mid-run: NATS stopped for 10 s, PostgreSQL restarted. The relay and every
consumer resume by themselves; nothing is lost, nothing applied twice, the audit stays clean.

Each test owns its servers (embedded, so they can be stopped and started on the same address)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cli.audit import audit_database
from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.runtime.postgres import EmbeddedPostgres
from shared.runtime.servers import EmbeddedNats
from shared.store.eventstore import EventStore
from shared.store.migrate import upgrade
from tests.integration.streams import stream_bodies
from tests.integration.world import World, burst, pods_running

pytestmark = pytest.mark.timeout(300)
NAMES = BusNames("outage")


async def stream_positions(url: str) -> list[int]:
    return [b["position"] for b in await stream_bodies(url, NAMES)]


async def log_positions(store: EventStore) -> list[int]:
    return [e.position async for page in store.read_all() for e in page]


async def settled(world: World, store: EventStore, url: str, seconds: float = 60) -> None:
    """Every committed event on the stream once, in order, and in the scheduler's projection."""
    deadline = time.monotonic() + seconds
    while True:
        committed = await log_positions(store)
        on_stream = await stream_positions(url)
        (scheduler,) = world.schedulers
        if on_stream == committed and scheduler.consumer.position == committed[-1]:
            assert scheduler.consumer.applied == len(committed)  # each applied once
            return
        assert time.monotonic() < deadline, (len(committed), len(on_stream), scheduler.consumer.position)
        await asyncio.sleep(0.2)


async def test_nats_stopped_for_10_s_and_postgresql_restarted_mid_run(tmp_path: Path):
    with EmbeddedPostgres(tmp_path / "pg") as postgres, EmbeddedNats(tmp_path / "nats") as server:
        url = postgres.url
        await upgrade(url)
        store = EventStore.connect(url, pool_size=8)
        bus = BusSettings(server.url, NAMES, insecure=True)  # an open server: a laboratory
        document = burst(40)
        document["spec"]["timeline"].append({"at": "30m", "scale": {"workload": "web", "replicas": 80}})
        try:
            async with World(document, bus, store) as world:
                world.start_schedulers()

                async def some_claims(_) -> bool:
                    return len([1 async for page in store.read_types(["NodeClaimCreated"]) for _ in page]) >= 1

                await world.until(some_claims)
                server.stop()
                await asyncio.sleep(2)
                (scheduler,) = world.schedulers
                assert "not connected to NATS" in await scheduler.shell.not_ready()  # readiness tells
                assert "not connected to NATS" in await world.relay.shell.not_ready()
                await asyncio.sleep(8)
                server.start()
                await world.until(lambda s: pods_running(s, 40), seconds=120)
                await settled(world, store, server.url)

                await world.until(lambda s: len([p for p in s.world.cluster.pods.values() if not p.node_name]) > 0)
                restarting = asyncio.create_task(asyncio.to_thread(postgres.restart, 3.0))
                await world.until(lambda _: world.relay.problem is not None, seconds=20)  # readiness tells
                await restarting
                await world.until(lambda s: pods_running(s, 80), seconds=150)
                await settled(world, store, server.url)
            created = [d async for page in store.read_types(["NodeClaimCreated"]) for _, d in page]
            pods = [pod for data in created for pod in data["pods"]]
            assert len(pods) == len(set(pods)), "a pod got two claims"
            assert len(created) == len(world.sim.world.cloud.instances)
            result = await audit_database(url)
            assert result.replay.violations == [] and result.counters_match, result.mismatches
        finally:
            await store.close()
