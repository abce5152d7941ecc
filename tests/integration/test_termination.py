"""Termination with the sim, the watcher, the relay and the scheduler, over a real NATS and
PostgreSQL: tiers in order, PodDisruptionBudgets kept until the termination grace period forces,
do-not-disrupt pods waiting, several replicas sharing the work, and the audit telling a drain."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from cli.audit import audit_database
from services.sim.service import SimService
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc
from tests.integration.world import World

pytestmark = pytest.mark.timeout(240)


def pool(cpus: list[str], grace: str | None = None) -> dict:
    doc = nodepool_doc(**{"metadata.name": "p"})
    doc["spec"]["template"]["spec"]["requirements"] = [
        {"key": "sim.nodewright.dev/instance-cpu", "operator": "In", "values": cpus}
    ]
    doc["spec"]["template"]["metadata"] = {"labels": {"team": "a"}}
    if grace:
        doc["spec"]["template"]["spec"]["terminationGracePeriod"] = grace
    return doc


def scenario(workloads: list[dict], *, cpus=("8",), grace: str | None = None, daemonsets=(), delete=1, at="5m"):
    return scenario_doc(
        "termination",
        duration="3h",
        cloud={"instanceTypes": 60, "launchLatency": "10s", "registrationLatency": "10s"},
        nodePools=[pool(list(cpus), grace)],
        workloads=workloads,
        daemonSets=list(daemonsets),
        timeline=[{"at": at, "deleteNodeClaims": {"nodepool": "p", "count": delete}}],
    )


async def events_of(store, types: list[str]) -> list[tuple[str, dict]]:
    async with store.driver_connection() as raw:
        rows = await raw.fetch("SELECT type, data FROM events WHERE type = ANY($1::text[]) ORDER BY position", types)
    return [(r[0], r[1]) for r in rows]


async def terminated(store) -> list[str]:
    return [d["nodeclaim"] for _, d in await events_of(store, ["NodeClaimTerminated"])]


def running(sim: SimService, workload: str) -> list:
    return [p for p in sim.world.cluster.pods.values() if p.owner_name == workload and p.node_name]


async def test_tiers_are_evicted_in_order_and_the_pods_land_on_a_new_node(store, migrated_url, bus):
    document = scenario(
        [
            {"name": "web", "replicas": 2, "requests": {"cpu": "1"}},
            {"name": "dns", "replicas": 1, "requests": {"cpu": "1"}, "priorityClassName": "system-cluster-critical"},
        ],
        daemonsets=[{"name": "agent", "requests": {"cpu": "100m"}}],
    )
    async with World(document, bus, store) as world:
        world.start_schedulers()
        world.start_termination()

        async def replaced(sim: SimService) -> bool:
            ended = await terminated(store)
            return len(ended) == 1 and len(running(sim, "web")) == 2 and len(running(sim, "dns")) == 1

        await world.until(replaced, seconds=180)
        (claim,) = await terminated(store)
        assert all(p.node_name != claim for p in world.sim.world.cluster.pods.values())
    evicted = [d for _, d in await events_of(store, ["PodEvicted"]) if d["nodeclaim"] == claim]
    tiers = [d["tier"] for d in evicted]
    assert tiers == sorted(tiers) and set(tiers) == {0, 1, 2}, evicted  # workloads, DaemonSet, critical
    assert {d["name"].split("-")[0] for d in evicted if d["tier"] == 0} == {"web"}
    assert all(d["reason"] == "Forceful Termination" and not d["forced"] for d in evicted)
    assert world.sim.world.cluster.pdb_violations == 0
    kinds = {e["reason"] for e in world.sim.world.cluster.events.values()}
    assert "Evicted" in kinds
    result = await audit_database(migrated_url, explain=f"nodeclaim-{claim}")
    assert result.replay.violations == [] and result.counters_match, result.mismatches
    story = [c.text for c in result.replay.story]
    assert any(t.startswith("deletion requested (Manual)") for t in story)
    assert any(t.startswith("draining node") for t in story)
    assert any("evicted in tier 1" in t for t in story)
    ended = [t for t in story if not t.startswith("NodeDeleted")]  # the Node goes with its finalizer
    assert ended[-1].startswith("terminated"), story


async def test_a_budget_that_allows_nothing_stalls_the_drain_until_the_grace_period_forces(store, migrated_url, bus):
    document = scenario(
        [{"name": "db", "replicas": 2, "requests": {"cpu": "1"}, "pdb": {"maxUnavailable": 0}}], grace="10m"
    )
    async with World(document, bus, store) as world:
        world.start_schedulers()
        world.start_termination()

        async def waiting(sim: SimService) -> bool:
            """The pass's two traces: the step in the log, then the Event in the cluster."""
            said = any(e["reason"] == "FailedDraining" for e in sim.world.cluster.events.values())
            return said and any(
                d["cause"] == "PodDisruptionBudget" for _, d in await events_of(store, ["PodEvictionWaiting"])
            )

        await world.until(waiting, seconds=120)
        assert await terminated(store) == []
        messages = [e["message"] for e in world.sim.world.cluster.events.values() if e["reason"] == "FailedDraining"]
        assert "Failed to drain node, evicting pod violates a PDB" in messages
        expiring = [
            e for e in world.sim.world.cluster.events.values() if e["reason"] == "TerminationGracePeriodExpiring"
        ]
        assert expiring and expiring[0]["message"].startswith("All pods will be deleted by ")
        cluster = world.sim.world.cluster
        ((claim, deleting),) = ((k, c) for k, c in cluster.nodeclaims.items() if cluster.nodeclaim_deleting(k))
        stamp = deleting["metadata"]["annotations"]["karpenter.sh/nodeclaim-termination-timestamp"]
        assert expiring[0]["message"] == f"All pods will be deleted by {stamp}"
        node = cluster.nodes[claim]  # the sim names a node after its claim
        assert node.labels["node.kubernetes.io/exclude-from-external-load-balancers"] == "karpenter"
        assert any(t.key == "karpenter.sh/disrupted" and t.effect.value == "NoSchedule" for t in node.taints)

        async def ended(_: SimService) -> bool:
            return len(await terminated(store)) == 1

        await world.until(ended, seconds=150)
    forced = [d for _, d in await events_of(store, ["PodEvicted"]) if d["forced"]]
    assert len(forced) == 2 and all(0 < d["grace_seconds"] <= 30 for d in forced)
    (draining,) = [d for _, d in await events_of(store, ["NodeClaimDraining"])]
    disrupted = [e["message"] for e in world.sim.world.cluster.events.values() if e["reason"] == "Disrupted"]
    assert disrupted and all(
        m.startswith(f"Deleting the pod to accommodate the terminationTime {draining['termination_time']} of the node.")
        and m.endswith("This bypasses the PDB of the pod and the do-not-disrupt annotation.")
        for m in disrupted
    )
    assert world.sim.world.cluster.pdb_violations == 0 and world.sim.world.cluster.forced_deletions == 2
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches


async def test_without_a_grace_period_a_do_not_disrupt_pod_waits_for_ever_and_says_so(store, bus):
    document = scenario(
        [
            {"name": "web", "replicas": 1, "requests": {"cpu": "1"}},
            {
                "name": "batch",
                "replicas": 1,
                "requests": {"cpu": "1"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
            },
        ]
    )
    async with World(document, bus, store) as world:
        world.start_schedulers()
        world.start_termination()

        async def web_moved(sim: SimService) -> bool:
            causes = [d["cause"] for _, d in await events_of(store, ["PodEvictionWaiting"])]
            evicted = [d["name"] for _, d in await events_of(store, ["PodEvicted"])]
            return "DoNotDisrupt" in causes and any(n.startswith("web") for n in evicted)

        await world.until(web_moved, seconds=120)
        await asyncio.sleep(4)  # four simulated minutes more: still waiting
        assert await terminated(store) == []
        assert len(running(world.sim, "batch")) == 1
        messages = [e["message"] for e in world.sim.world.cluster.events.values() if e["reason"] == "FailedDraining"]
        assert "Failed to drain node, 1 pods are waiting to be evicted" in messages


async def test_three_replicas_share_thirty_drains_and_each_claim_is_drained_once(store, migrated_url, bus):
    document = scenario([{"name": "web", "replicas": 30, "requests": {"cpu": "3"}}], cpus=("4",), delete=30, at="10m")
    async with World(document, bus, store) as world:
        world.start_schedulers()
        replicas = world.start_termination(3)

        async def all_ended(_: SimService) -> bool:
            return len(await terminated(store)) >= 30

        await world.until(all_ended, seconds=200)
    done = [name for r in replicas for name in r.finished]
    assert len(done) == len(set(done)) == 30  # each claim terminated by one replica
    assert sum(1 for r in replicas if r.finished) >= 2  # and the work was shared
    per_pod = Counter(d["name"] for _, d in await events_of(store, ["PodEvicted"]))
    assert per_pod and set(per_pod.values()) == {1}
    assert world.sim.world.cluster.pdb_violations == 0
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches
