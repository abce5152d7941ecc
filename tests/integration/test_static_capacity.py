"""Static capacity (gate `StaticCapacity`, docs/static-capacity.md) with the sim, the watcher, the
scheduler, disruption and termination over a real NATS and PostgreSQL, driven by the real kubectl:
a pool of `replicas: 5` under `limits.nodes: 4` holds 4 and says why; with the limit raised it
has 5; `kubectl scale nodepool s --replicas 2` removes 3, empty nodes first, by a forceful
`Overprovisioned` decision the audit re-checks; a pending pod that only the pool would take never
makes it grow. A changed template drifts its nodes, each replaced one-for-one by a claim of the
pool, one at a time as its budget says. (The pure cores: tests/unit/test_static_capacity.py and
its neighbours.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cli.audit import audit_database
from tests.integration.test_disruption import disruption_story, events_of, live_claims, pool, scenario
from tests.integration.world import World

pytestmark = pytest.mark.timeout(300)
KUBECTL = str(Path(sys.executable).parent / "kubectl")
ONLY_S = {"karpenter.sh/nodepool": "s"}


async def kubectl(config: Path, *args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run, [KUBECTL, "--kubeconfig", str(config), *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_static_pool_keeps_its_replicas_within_its_limit_and_scales_down(store, migrated_url, bus):
    static = pool("s", budgets=[{"nodes": "0"}], replicas=5, limits={"nodes": "4"})  # no graceful disruption
    document = scenario(
        [static],
        [
            {"name": "kept", "replicas": 1, "requests": {"cpu": "1"}, "nodeSelector": ONLY_S},
            {"name": "huge", "replicas": 2, "requests": {"cpu": "64"}, "nodeSelector": ONLY_S},  # fits no node of s
        ],
        [],
    )
    with capture_logs() as logs:
        async with World(document, bus, store) as world:
            world.sim.world.cluster.static_capacity = True
            world.start_schedulers(static_capacity=True)
            world.start_termination()
            world.start_disruption(static_capacity=True)
            config = world.api.user_kubeconfig(world.sim)

            async def held() -> bool:
                return await live_claims(store) == 4 and any(e["event"] == "nodepool node limit reached" for e in logs)

            await world.until(lambda sim: held(), seconds=120)
            await kubectl(
                config, "patch", "nodepool", "s", "--type", "merge", "-p", '{"spec":{"limits":{"nodes":"10"}}}'
            )

            async def bound() -> bool:  # five nodes, and the small pod on one of them
                pods = world.sim.world.cluster.pods.values()
                return await live_claims(store) == 5 and any(p.node_name for p in pods if p.name.startswith("kept"))

            await world.until(lambda sim: bound(), seconds=120)
            out = await kubectl(config, "scale", "nodepool", "s", "--replicas", "2")
            assert "scaled" in out

            async def scaled() -> bool:
                ended = [d for _, d in await events_of(store, ["NodeClaimTerminated"])]
                return len(ended) == 3 and await live_claims(store) == 2

            await world.until(lambda sim: scaled(), seconds=120)
            kept_on = {p.node_name for p in world.sim.world.cluster.pods.values() if p.name.startswith("kept")}
    limited = [e for e in logs if e["event"] == "nodepool node limit reached"]
    assert limited[0]["NodePool"] == {"name": "s"} and limited[0]["desired"] == 5 and limited[0]["current"] == 4
    created = [d for _, d in await events_of(store, ["NodeClaimCreated"])]
    assert len(created) == 5 and all(d["pods"] == [] for d in created)  # the huge pods never made it grow
    (decision,) = [d for _, d in await events_of(store, ["DisruptionDecided"])]
    assert decision["reason"] == "Overprovisioned" and decision["forceful"] and len(decision["candidates"]) == 3
    nodes = {d["nodeclaim"]: d["node"] for _, d in await events_of(store, ["NodeRegistered"]) if d.get("nodeclaim")}
    assert not kept_on & {nodes.get(c) for c in decision["candidates"]}  # empty nodes went first
    report = await audit_database(migrated_url)
    assert report.ok, report.violations


async def test_a_static_pools_drifted_nodes_are_replaced_one_at_a_time_within_its_budget(store, migrated_url, bus):
    static = pool("s", budgets=[{"nodes": "1"}], replicas=2, limits={"nodes": "3"})
    document = scenario(
        [static], [{"name": "kept", "replicas": 2, "requests": {"cpu": "1"}, "nodeSelector": ONLY_S}], []
    )
    async with World(document, bus, store) as world:
        world.sim.world.cluster.static_capacity = True
        world.start_schedulers(static_capacity=True)
        world.start_termination()
        world.start_disruption(static_capacity=True)
        config = world.api.user_kubeconfig(world.sim)

        async def two() -> bool:
            return await live_claims(store) == 2 and len(await events_of(store, ["NodeClaimInitialized"])) == 2

        await world.until(lambda sim: two(), seconds=120)
        patch = '{"spec":{"template":{"metadata":{"labels":{"team":"b"}}}}}'
        await kubectl(config, "patch", "nodepool", "s", "--type", "merge", "-p", patch)

        async def replaced() -> bool:
            ended = [d for _, d in await events_of(store, ["NodeClaimTerminated"])]
            return len(ended) == 2 and await live_claims(store) == 2

        await world.until(lambda sim: replaced(), seconds=120)
    decisions, most, _ = await disruption_story(store)
    assert [(d["reason"], len(d["candidates"]), len(d["replacements"])) for d in decisions] == [("Drifted", 1, 1)] * 2
    assert most == 1  # the budget: one node at a time
    created = [d for _, d in await events_of(store, ["NodeClaimCreated"])]
    assert len(created) == 4 and all(d["nodepool"] == "s" for d in created)  # each replaced one-for-one
    report = await audit_database(migrated_url)
    assert report.ok, report.violations
