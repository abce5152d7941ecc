"""NodeOverlays (gate `NodeOverlay`) through the real services over NATS and PostgreSQL: the sim
serves an overlay halving family r5's price, the watcher records it and marks it valid, the
scheduler plans and launches r5 (c5 is the cheapest without it); the overlay moved to family m5,
consolidation replaces the r5 node by an m5 one (c5 again without it). The audit re-checks the run."""

from __future__ import annotations

import pytest

from cli.audit import audit_database
from services.sim.cluster import SimCluster
from shared.ports.cluster import NODEOVERLAY
from tests.integration.test_disruption import events_of, pool, scenario, web
from tests.integration.world import World

pytestmark = pytest.mark.timeout(120)
FAMILY = "sim.nodewright.dev/instance-family"


def overlay(family: str) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "half"},
        "spec": {"requirements": [{"key": FAMILY, "operator": "In", "values": [family]}], "priceAdjustment": "-50%"},
    }


def recorded(store, family: str):
    async def done(sim) -> bool:
        rows = await events_of(store, ["NodeOverlayApplied"])
        return bool(rows) and rows[-1][1]["nodeoverlay_object"]["spec"]["requirements"][0]["values"] == [family]

    return done


def valid(sim) -> bool:
    status = (sim.world.cluster.nodeoverlays.get("half") or {}).get("status") or {}
    return any(c["type"] == "ValidationSucceeded" and c["status"] == "True" for c in status.get("conditions", []))


async def test_a_half_price_overlay_changes_the_launch_and_the_consolidation(store, migrated_url, bus):
    document = scenario([pool(budgets=[{"nodes": "1"}])], [web(1)], [], duration="2h")
    async with World(document, bus, store, overlays=True) as world:
        cluster: SimCluster = world.sim.world.cluster
        cluster.create_custom(NODEOVERLAY, overlay("r5"), world.sim.world.now)
        await world.until(recorded(store, "r5"))
        world.start_schedulers()
        world.start_termination()

        async def launched(sim) -> bool:
            return bool(await events_of(store, ["NodeClaimLaunched"]))

        await world.until(launched)
        await world.until(valid)
        (first,) = [d for _, d in await events_of(store, ["NodeClaimLaunched"])]
        assert first["instance_type"] == "r5.xlarge"

        moved = {**cluster.nodeoverlays["half"], "spec": overlay("m5")["spec"]}
        cluster.update_custom(NODEOVERLAY, moved)
        await world.until(recorded(store, "m5"))
        world.start_disruption()

        async def replaced(sim) -> bool:
            created = [d for _, d in await events_of(store, ["NodeClaimCreated"]) if d.get("replacement_for")]
            return bool(created) and len(await events_of(store, ["NodeClaimLaunched"])) >= 2

        await world.until(replaced)
    (decided,) = [d for _, d in await events_of(store, ["DisruptionDecided"])]
    assert decided["reason"] == "Underutilized" and decided["candidates"] == [first["nodeclaim"]]
    (replacement,) = [d for _, d in await events_of(store, ["NodeClaimCreated"]) if d.get("replacement_for")]
    assert replacement["instance_types"][0]["name"] == "m5.xlarge"
    launches = {d["nodeclaim"]: d["instance_type"] for _, d in await events_of(store, ["NodeClaimLaunched"])}
    assert launches[replacement["nodeclaim"]] == "m5.xlarge"  # the fleet asked in the planned order
    report = await audit_database(migrated_url)
    assert report.ok, report.violations
