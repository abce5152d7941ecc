"""The offline runner: a scenario played in one process, on a manual clock, through the services'
own controllers, with no server anywhere.

The sim's world (`services.sim.world`) is the cloud and the cluster. Each step of `STEP` moves
the clock, advances the world, and then runs, in the order a live system most often does:
the watcher's facts (`services.watcher.facts`, from the cluster's changes), the scheduler's
lifecycle, garbage collection and provisioning pass, disruption's commands and its pass, and
one pass of each termination under way. These are the services' own objects, handed an
in-memory store (`services.whatif.memory`) whose appends go through the store's own pure
checks: so every rule, from `schedule()` to a budget's reservation, is the one the services
run. A pass whose inputs did not move since the last is skipped (`services.whatif.inputs`):
it would find what the last one found. What differs from a live run is only time: a step here
is `STEP` of simulated time where each service would look on its own cadence, and every
projection is up to date at once.

Deterministic: claim names, decision ids and reconcile ids come from a seeded generator.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import structlog

from services.disruption.service import PRODUCER as DISRUPTION
from services.disruption.service import DisruptionService
from services.scheduler.service import PRODUCER as SCHEDULER
from services.scheduler.service import SchedulerService
from services.sim.catalog import InstanceType
from services.sim.cloud import SimCloud
from services.sim.inprocess import InProcessCloud, InProcessCluster
from services.sim.world import World
from services.termination.drain import ClaimDrain
from services.termination.service import TerminationService
from services.watcher.facts import Facts, fact_units
from services.watcher.overlays import Overlays
from services.whatif.inputs import Key, PassInputs
from services.whatif.memory import FENCE, MemoryStore
from shared.api.scenario import Scenario
from shared.events.envelope import RecordedEvent
from shared.ports.cluster import ADDED, NODEOVERLAY, WatchEvent
from shared.runtime.ledger import Ledger
from shared.whatif.sim import UNKNOWN, SimSettings

STEP = timedelta(seconds=10)
"""Simulated time between two looks: upstream's disruption poll, the scheduler's longest batch."""
_OFFLINE_BUS = "nats://127.0.0.1:1"
"""A bus address the services' shells are built with and never connect to."""


class ManualClock:
    """The services' `Clock`, moved only by the runner."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


class _Lead:
    """The leader lock of a process of one: always held, with the one fence."""

    fence = FENCE
    holding = True

    async def held(self) -> bool:
        return True


class _Reached:
    """What a ledger waits on: the memory store hands each event to the projections at once."""

    async def reach(self, position: int) -> None:
        return None


@dataclass
class Played:
    """What a run of the runner left: its log, the wall seconds it took, and the scenario's sim
    settings (its seed, catalog size and zones: what a replay of the log needs, as a run's
    description keeps them for `nodewright run`)."""

    log: list[RecordedEvent]
    start: datetime
    end: datetime
    seconds: float
    interruptions: list[dict[str, str]] = field(default_factory=list)
    sim: SimSettings = UNKNOWN


class Runner:
    def __init__(
        self,
        scenario: Scenario,
        *,
        catalog: list[InstanceType] | None = None,
        seed: int = 0,
        every_pass: bool = False,
        static_capacity: bool = False,
        node_repair: bool = False,
        spot_to_spot: bool = False,
    ) -> None:
        """`catalog`: the instance types the cloud offers (default: the scenario's generated ones);
        `every_pass`: a disruption pass on every step, as before its inputs were watched;
        `static_capacity`, `node_repair`, `spot_to_spot`: the `StaticCapacity`, `NodeRepair` and
        `SpotToSpotConsolidation` gates, as the services take them."""
        self.scenario = scenario
        self.catalog_given = catalog is not None
        self.world = World(scenario)
        if catalog is not None:
            self.world.cloud = SimCloud(catalog, list(self.world.cloud.windows), scenario.spec.seed)
        self.clock = ManualClock(scenario.start)
        self.store = MemoryStore()
        self.random = random.Random(seed)
        cloud, cluster = InProcessCloud(self.world), InProcessCluster(self.world)
        self.facts = Facts()
        self.overlays = Overlays(enabled=True)  # replayed only if recorded, that is with the gate on
        self.seen = 0
        self.scheduler = SchedulerService(self.store, cloud, self.clock, _OFFLINE_BUS, static_capacity=static_capacity)
        self.disruption = DisruptionService(
            self.store,
            cloud,
            self.clock,
            _OFFLINE_BUS,
            cluster=cluster,
            static_capacity=static_capacity,
            node_repair=node_repair,
            spot_to_spot=spot_to_spot,
        )
        self.termination = TerminationService(self.store, cloud, cluster, self.clock, _OFFLINE_BUS)
        self._lead(self.scheduler, SCHEDULER, ("lifecycle", "garbage", "provisioner", "static"))
        self._lead(self.disruption, DISRUPTION, ("commands",))
        self.store.follow(lambda e: self.scheduler.projection.apply((e,)))
        self.store.follow(self.disruption.projection.apply)
        self.store.follow(self.termination.projection.apply)
        self.store.follow(self._deletion_asked)
        self.drains: dict[str, ClaimDrain] = {}
        self.every_pass = every_pass
        self.inputs = PassInputs(self.disruption, self.store)
        self._passed: Key | None = None
        self.passes = 0
        self._planned: tuple[int, tuple[tuple[str, str, str], ...]] | None = None
        self.plans = 0

    def _lead(self, service: Any, producer: str, helpers: tuple[str, ...]) -> None:
        """The service's ledger, and each helper's, writing to the memory store as its leader."""
        ledger = Ledger(self.store, _Lead(), _Reached(), producer=producer)  # type: ignore[arg-type]
        service.ledger = ledger
        for name in helpers:
            if (helper := getattr(service, name)) is not None:  # `static`: None with its gate off
                helper.ledger = ledger

    def _deletion_asked(self, event: RecordedEvent) -> None:
        """Termination's work: every claim whose deletion is asked for gets a drain."""
        if event.type == "NodeClaimDeletionRequested":
            name = event.data["nodeclaim"]
            self.drains.setdefault(name, ClaimDrain(self.termination.drains, name))

    def play(self, until: datetime | None = None, observe: Callable[[datetime], None] | None = None) -> Played:
        """Step from the scenario's start to `until` (its end); `observe` is called after each step."""
        end = until or self.scenario.end
        started = time.perf_counter()
        with self._deterministic():
            asyncio.run(self._play(end, observe))
        spec = self.scenario.spec
        count = None if self.catalog_given else spec.cloud.instance_types
        sim = SimSettings(spec.seed, "the played scenario", True, count, tuple(spec.cloud.zones))
        return Played(
            self.store.log, self.scenario.start, end, time.perf_counter() - started, list(self.world.interruptions), sim
        )

    async def _play(self, end: datetime, observe: Callable[[datetime], None] | None) -> None:
        now = self.scenario.start
        await self.step(now)
        while now < end:
            now = min(now + STEP, end)
            await self.step(now)
            if observe is not None:
                observe(now)

    async def step(self, now: datetime) -> None:
        self.clock.at = now
        self.world.advance(now)
        await self._watch()
        await self._schedule(now)
        await self._watch()
        await self._disrupt(now)
        await self._terminate()
        await self._watch()

    async def _watch(self) -> None:
        """The watcher: the cluster's changes since the last look, as facts, recorded."""
        cluster = self.world.cluster
        overlaid = [  # the demand's overlays (in force from its start): recorded once, spec unchanged
            f
            for name, document in cluster.nodeoverlays.items()
            for f in self.overlays.observe(
                WatchEvent(cluster.version_of(NODEOVERLAY, name), NODEOVERLAY, ADDED, name, document)
            )
        ]
        changes = cluster.changes_since(self.seen)
        if not changes and not overlaid:
            return
        if changes:
            self.seen = changes[-1].resource_version
        facts = [*overlaid, *(f for change in changes for f in self.facts.observe(change))]
        if facts:
            await self.store.append_units(fact_units(facts, self.clock.now()))

    async def _schedule(self, now: datetime) -> None:
        """The scheduler leader's loop, one turn: owed steps, unlaunched claims, garbage, a pass."""
        s = self.scheduler
        await s.lifecycle.record_owed()
        if s.projection.unlaunched():
            await s.lifecycle.launch_unlaunched(now)
        if s.garbage.due(now):
            await s.garbage.collect(now)
        if s.static is not None:
            await s.static.provision(now)
        if not s.projection.plannable():
            return
        # live, a pass while pods wait comes at least every 10 s; one whose inputs (the log, the
        # offerings skipped for a capacity error) are those of the last finds the same plan
        types = [t.name for t in self.world.cloud.instance_types()]
        inputs = (len(self.store.log), tuple(s.offerings.unavailable.unavailable(types, now)))
        if self.every_pass or inputs != self._planned:
            self._planned = inputs
            s.projection.changed = False
            await s.provisioner.plan_and_launch(now)
            self.plans += 1

    async def _disrupt(self, now: datetime) -> None:
        """Disruption's commands every step; its pass when an input moved since the last one
        (see `services.whatif.inputs`), or, with `every_pass`, on each step as before."""
        d = self.disruption
        acted = await d.commands.progress(now)
        inputs = self.inputs.key(now)
        if self.every_pass or acted or inputs != self._passed or self.inputs.due(now):
            self._passed = inputs
            await d.disrupt(now)
            self.passes += 1
            self.inputs.passed(now)

    async def _terminate(self) -> None:
        for name, drain in list(self.drains.items()):
            if await drain.step():
                del self.drains[name]

    @contextmanager
    def _deterministic(self) -> Iterator[None]:
        """Names and ids from the runner's own generator: two plays of one input are equal. The
        controllers' log lines are dropped while it plays (thousands a simulated hour)."""

        def uuid4() -> uuid.UUID:
            return uuid.UUID(int=self.random.getrandbits(128), version=4)

        kept = structlog.get_config()
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
        try:
            with mock.patch("uuid.uuid4", uuid4):
                yield
        finally:
            structlog.configure(**kept)
