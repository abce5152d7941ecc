"""Node repair (gate `NodeRepair`) with the sim, the watcher, the scheduler, disruption and
termination over a real NATS and PostgreSQL: a node NotReady past its 30 minutes is repaired
forcefully and its pod moves, as is one whose node monitoring agent reports KernelReady False;
three of ten at once are held back, and said so; the audit re-checks
both. (Without the gate the service has no policies: `tests/unit/disruption/test_repair.py`.)"""

from __future__ import annotations

import pytest

from cli.audit import audit_database
from tests.integration.test_disruption import events_of, live_claims, play, pool, scenario, seen, web

pytestmark = pytest.mark.timeout(300)


def failing(count: int, *conditions: str) -> dict:
    """`count` nodes' kubelets stop (Ready Unknown), then one node per agent condition turns False."""
    return scenario(
        [pool(budgets=[{"nodes": "0"}])],  # no graceful disruption: what goes is repaired
        [web(10)],
        [
            {"at": "5m", "nodesNotReady": {"nodepool": "p", "count": count}},
            *({"at": "5m", "nodesNotReady": {"nodepool": "p", "count": 1, "condition": c}} for c in conditions),
        ],
    )


async def test_nodes_unhealthy_past_their_toleration_are_replaced_ready_and_agent_conditions(store, migrated_url, bus):
    """One kubelet stops (Ready Unknown) and one node monitoring agent reports KernelReady False:
    two of ten, within the 20%, so both are repaired after their 30 minutes."""
    terminated = seen(store, "NodeClaimTerminated", lambda d: d["reason"] == "Unhealthy", 2)

    async def repaired() -> bool:
        return await terminated() and await live_claims(store) == 10

    await play(failing(1, "KernelReady"), bus, store, 42, done=repaired, node_repair=True)
    decided = [d for _, d in await events_of(store, ["DisruptionDecided"])]
    repairs = sorted((d for d in decided if d["reason"] == "Unhealthy"), key=lambda d: d["unhealthy"]["condition"])
    assert [(d["unhealthy"]["condition"], d["unhealthy"]["status"]) for d in repairs] == [
        ("KernelReady", "False"),
        ("Ready", "Unknown"),
    ]
    assert all(d["forceful"] and d["unhealthy"]["toleration_seconds"] == 1800 for d in repairs)
    ended = {d["nodeclaim"] for _, d in await events_of(store, ["NodeClaimTerminated"])}
    assert ended == {name for d in repairs for name in d["candidates"]}
    assert await live_claims(store) == 10  # their pods went to new nodes
    report = await audit_database(migrated_url)
    assert report.ok, report.violations


async def test_three_of_ten_unhealthy_are_held_back_and_said(store, migrated_url, bus):
    said = seen(store, "DisruptionBlocked", lambda d: d["cause"] == "NodeRepairBlocked", 3)
    await play(failing(3), bus, store, 42, done=said, node_repair=True)
    decided = [d for _, d in await events_of(store, ["DisruptionDecided"])]
    assert [d for d in decided if d["reason"] == "Unhealthy"] == []
    blocked = [d for _, d in await events_of(store, ["DisruptionBlocked"]) if d["cause"] == "NodeRepairBlocked"]
    assert {d["nodeclaim"] for d in blocked} and len(blocked) == len({d["nodeclaim"] for d in blocked}) == 3
    assert blocked[0]["message"] == "more than 20% nodes are unhealthy in the nodepool"
    assert (await audit_database(migrated_url)).ok
