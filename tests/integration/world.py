"""A whole system in one test process: the sim, the relay, the watcher and scheduler replicas,
on a shared accelerated clock and a bus deployment of the test's own."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from services.disruption.service import DisruptionService
from services.relay.service import RelayService
from services.scheduler.service import SchedulerService
from services.sim.service import SimService
from services.termination.service import TerminationService
from services.watcher.service import WatcherService
from shared.adapters.sim import SimClient
from shared.api.scenario import parse_scenario
from shared.bus.connection import BusSettings
from shared.clock import AcceleratedClock
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc
from tests.kube_api import LocalApi
from tests.sim_callers import AnyCaller, provisioned

START = datetime(2026, 11, 23, 9, tzinfo=UTC)
SPEED = 120
"""Simulated seconds per wall second: a simulated hour in 30 s."""


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


class World:
    """The sim, the relay, the watcher and `schedulers` scheduler replicas on a shared accelerated
    clock, on a deployment of the test's own; more schedulers can be started later. Each service
    reaches the cluster through the sim's Kubernetes API as itself (`clusters`), and asks the sim's
    cloud as itself (its own SimClient, so the sim answers only what it may send); `client` asks
    the cloud as whichever service may (`tests.sim_callers`)."""

    def __init__(
        self, document: dict, bus: BusSettings, store, *, speed: float = SPEED, overlays: bool = False
    ) -> None:
        """`overlays`: the `NodeOverlay` gate, for the watcher (which records overlays and
        writes their status with the catalog it asks the sim for)."""
        self.overlays = overlays
        self.clock = AcceleratedClock(START, speed=speed)
        self.api = LocalApi()
        self.sim = SimService(parse_scenario(document), self.clock, bus, api=self.api.options)
        self.bus, self.store = bus, store
        self.stopping = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.schedulers: list[SchedulerService] = []

    async def __aenter__(self) -> World:
        await provisioned(self.bus)
        self.client = await AnyCaller.connect(self.bus)
        self.callers: dict[str, SimClient] = self.client.clients
        self.tasks.append(asyncio.create_task(self.sim.run(self.stopping)))
        self.relay = RelayService(self.store, self.bus)
        self.tasks.append(asyncio.create_task(self.relay.run(self.stopping)))
        while self.sim.api_url is None:
            await asyncio.sleep(0.05)
        self.clusters = {
            service: await self.api.connect(self.sim, service, self.clock, overlays=self.overlays)
            for service in ("watcher", "scheduler", "disruption", "termination")
        }
        await asyncio.sleep(0.3)
        watcher = WatcherService(
            self.store,
            self.clusters["watcher"],
            self.clock,
            self.bus,
            overlays=self.overlays,
            cloud=self.callers["watcher"],
        )
        self.tasks.append(asyncio.create_task(watcher.run(self.stopping)))
        return self

    def start_termination(self, replicas: int = 1, **options) -> list[TerminationService]:
        started = []
        for _ in range(replicas):
            service = TerminationService(
                self.store, self.callers["termination"], self.clusters["termination"], self.clock, self.bus, **options
            )
            started.append(service)
            self.tasks.append(asyncio.create_task(service.run(self.stopping)))
        self.terminations = [*getattr(self, "terminations", []), *started]
        return started

    def start_disruption(self, replicas: int = 1, **options) -> list[DisruptionService]:
        started = []
        for _ in range(replicas):
            service = DisruptionService(
                self.store,
                self.callers["disruption"],
                self.clock,
                self.bus,
                cluster=self.clusters["disruption"],
                **options,
            )
            started.append(service)
            self.tasks.append(asyncio.create_task(service.run(self.stopping)))
        self.disruptions = [*getattr(self, "disruptions", []), *started]
        return started

    def start_schedulers(self, replicas: int = 1, **options) -> None:
        for _ in range(replicas):
            scheduler = SchedulerService(
                self.store,
                self.callers["scheduler"],
                self.clock,
                self.bus,
                cluster=self.clusters["scheduler"],
                **options,
            )
            self.schedulers.append(scheduler)
            self.tasks.append(asyncio.create_task(scheduler.run(self.stopping)))

    async def until(self, condition, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while not await _holds(condition, self.sim):
            assert time.monotonic() < deadline, "timed out"
            assert not any(t.done() for t in self.tasks), [t.exception() for t in self.tasks if t.done()]
            await asyncio.sleep(0.2)

    async def __aexit__(self, *exc: object) -> None:
        self.stopping.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), 30)
        await self.client.close()
        for cluster in getattr(self, "clusters", {}).values():
            await cluster.close()


async def _holds(condition, sim: SimService) -> bool:
    held = condition(sim)
    return bool(await held) if asyncio.iscoroutine(held) else bool(held)


async def play(document: dict, bus: BusSettings, store, until, replicas: int = 1) -> SimService:
    async with World(document, bus, store) as world:
        world.start_schedulers(replicas)
        await world.until(until)
    return world.sim


def pods_running(sim: SimService, n: int) -> bool:
    pods = [p for p in sim.world.cluster.pods.values() if p.owner_name == "web"]
    return len(pods) == n and all(p.node_name for p in pods)
