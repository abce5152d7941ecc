"""The disruption service records the feature gates it runs with (`FeatureGatesObserved`) over a
real NATS and PostgreSQL: once when it first leads, of two replicas only by the leader, not
again when a replica with the same gates takes over, and anew when one with other gates does."""

from __future__ import annotations

import asyncio

import pytest

from shared.config import feature_gates
from shared.events.contracts import FeatureGatesObserved
from tests.integration.test_disruption import pool, scenario, web
from tests.integration.world import World

pytestmark = pytest.mark.timeout(300)
STREAM = FeatureGatesObserved.stream_of("disruption")
GATES = feature_gates("StaticCapacity=true")


def leading(replicas) -> list[int]:
    return [i for i, r in enumerate(replicas) if r.metrics.leader._value.get() == 1]


async def take_over(world: World, tasks, gates) -> None:
    """Stop the replicas, start one with `gates`, and wait until it leads and its projection
    has caught up (it records, if at all, before its first pass)."""
    for task in tasks:
        world.tasks.remove(task)
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    (fresh,) = world.start_disruption(gates=gates)
    await world.until(lambda sim: fresh.last_pass is not None, seconds=60)


async def test_the_gates_are_recorded_once_and_again_only_when_they_change(store, bus):
    async with World(scenario([pool()], [web(1)], []), bus, store) as world:
        replicas = world.start_disruption(2, gates=GATES)
        await world.until(lambda sim: any(r.last_pass is not None for r in replicas), seconds=60)
        await asyncio.sleep(1)  # the standby tries the lock meanwhile
        assert len(leading(replicas)) == 1
        recorded = await store.read_stream(STREAM)
        assert [(e.type, e.data) for e in recorded] == [
            ("FeatureGatesObserved", {"service": "disruption", "gates": GATES})
        ]
        assert recorded[0].metadata.producer == "disruption"

        await take_over(world, world.tasks[-2:], GATES)  # a restart, same gates
        assert len(await store.read_stream(STREAM)) == 1

        other = {**GATES, "NodeRepair": True}
        await take_over(world, world.tasks[-1:], other)
        recorded = await store.read_stream(STREAM)
        assert [e.data["gates"] for e in recorded] == [GATES, other]
        assert [e.version for e in recorded] == [1, 2]
