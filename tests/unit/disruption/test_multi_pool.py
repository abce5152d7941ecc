"""Multi-node consolidation across NodePools (upstream's `MultiNodeConsolidation` takes the
candidates of every pool, each within its own pool's budget): the pass finds the command, and
the service records it as one decision per pool, appended together and carried out as one."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

from services.disruption.projection import Projection
from services.disruption.service import candidates_by_pool
from services.disruption.world import build
from services.whatif.runner import Runner
from shared.api.scenario import parse_scenario
from shared.disruption.passes import graceful, recheck
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.policy.counters import PoolCounters, evolve
from shared.runtime.catalogs import Loaded
from shared.scheduling.offerings import InstanceOption, Offer
from tests.factories import T0, applied, created, initialized, launched
from tests.whatif_pools import nodepool


def _type(cpu: int, price: float) -> InstanceOption:
    capacity = {"cpu": Decimal(cpu), "memory": Decimal(cpu * 4 * 2**30), "pods": Decimal(110)}
    name = f"type-{cpu}-{cpu * 4}Gi"
    return InstanceOption(
        name, capacity, capacity, {"node.kubernetes.io/instance-type": name}, (Offer("a", "on-demand", price),)
    )


# two 2-cpu nodes at 1.0/h; one 4-cpu node holds both at 0.9/h (a multi-node replacement must be
# cheaper than a candidate's own type, upstream's `filterOutSameInstanceType`)
CATALOG = [_type(2, 1.0), _type(4, 0.9)]
LATER = T0 + timedelta(hours=1)


def fold(events: list[c.Event]) -> tuple[Projection, dict[str, PoolCounters]]:
    projection, counters, claims = Projection(), {}, {}
    for i, event in enumerate(events, 1):
        data, at = event.payload(), T0 + timedelta(seconds=i)
        projection.apply(RecordedEvent(i, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1, data, Metadata("t"), at, at))
        pool = data.get("nodepool")
        if isinstance(pool, str):
            evolve(counters.setdefault(pool, PoolCounters(pool)), claims, event.TYPE, data, i)
    return projection, counters


def busy_node(claim: str, pool: str) -> list[c.Event]:
    """A 2-cpu node of `pool` with one 1-cpu pod."""
    return [
        created(claim, pool),
        launched(claim, pool, zone="a").model_copy(update={"labels": {"kubernetes.io/arch": "amd64", "team": "a"}}),
        c.NodeRegistered(
            node=f"{claim}-node",
            provider_id=f"sim:///{claim}",
            nodeclaim=claim,
            nodepool=pool,
            labels={"karpenter.sh/nodepool": pool},
            allocatable={"cpu": "2", "memory": "8Gi", "pods": "110"},
        ),
        c.NodeClaimRegistered(nodeclaim=claim, nodepool=pool, node=f"{claim}-node"),
        initialized(claim, pool),
        c.NodeInitialized(node=f"{claim}-node", nodeclaim=claim, nodepool=pool),
        c.PodBound(namespace="default", name=f"{claim}-pod", node=f"{claim}-node", requests={"cpu": "1"}),
    ]


def two_pools(q_budget: str = "100%") -> list[c.Event]:
    return [applied("p"), applied("q", budgets=[{"nodes": q_budget}]), *busy_node("a", "p"), *busy_node("b", "q")]


def test_one_command_takes_the_nodes_of_two_pools():
    projection, counters = fold(two_pools())
    world = build(projection, counters, Loaded(CATALOG), LATER)
    (found,) = graceful(world).found
    assert found.consolidation_type == "multi" and sorted(found.command.candidates) == ["a", "b"]
    assert found.command.replacements == 1 and found.new_claims[0].options[0].instance.name == "type-4-16Gi"
    parts = candidates_by_pool(found, world)
    assert sorted(parts.items()) == [("p", ["a"]), ("q", ["b"])] and next(iter(parts)) == found.nodepool


def test_each_candidate_stays_within_its_own_pools_budget():
    projection, counters = fold(two_pools(q_budget="0"))
    result = graceful(build(projection, counters, Loaded(CATALOG), LATER))
    assert all(f.consolidation_type != "multi" for f in result.found)  # one candidate left: not multi
    assert all("b" not in f.command.candidates for f in result.found)


def test_the_recheck_judges_the_command_across_its_pools():
    projection, counters = fold(two_pools())
    world = build(projection, counters, Loaded(CATALOG), LATER)
    (found,) = graceful(world).found
    verdict = recheck(
        world,
        reason=found.command.reason,
        candidates=found.command.candidates,
        replacements=1,
        moved=[],
        pools=[claim.nodepool for claim in found.new_claims],
    )
    assert not verdict.cancelled and sorted(verdict.keep) == ["a", "b"] and len(verdict.new_claims) == 1
    moved = recheck(
        world, reason=found.command.reason, candidates=found.command.candidates, replacements=1, moved=["b"]
    )
    assert moved.cancelled  # one part moved since the decision: the whole command goes


def test_a_decision_names_its_parts_with_the_first_holding_the_replacements():
    base = {"nodepool": "p", "reason": "Underutilized", "candidates": ["a"]}
    ok = c.DisruptionDecided(decision_id="d1", replacements=["r"], command_parts=["d1", "d2"], **base)
    assert ok.parts == ["d1", "d2"] and c.DisruptionDecided(decision_id="d3", **base).parts == ["d3"]
    for parts, replacements in ((["d2", "d3"], []), (["d2", "d1"], ["r"]), (["d1", "d1"], [])):
        try:
            c.DisruptionDecided(decision_id="d1", replacements=replacements, command_parts=parts, **base)
        except ValueError as exc:
            assert "command_parts" in str(exc)
        else:
            raise AssertionError(f"{parts} accepted")


def two_pool_day(a_limits: dict[str, str]) -> dict:
    """Pool a (weight 10) fills one 4-cpu node with `early`; `late` goes to pool b. At 10m each
    keeps one 500m pod: one 2-cpu node would hold both."""

    def pool(name: str, weight: int, limits: dict[str, str]) -> dict:
        doc = nodepool(name, weight, "10", "100%", name)
        doc["spec"]["template"]["spec"]["requirements"][0]["values"] = ["2", "4"]
        doc["spec"]["limits"] = limits
        return doc

    small = {"cpu": "500m", "memory": "512Mi"}
    return {
        "apiVersion": "nodewright.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "multi-pool"},
        "spec": {
            "start": "2026-11-23T09:00:00Z",
            "duration": "20m",
            "seed": 3,
            "cloud": {"instanceTypes": 60, "launchLatency": "20s", "registrationLatency": "10s"},
            "nodePools": [pool("a", 10, a_limits), pool("b", 1, {"nodes": "10"})],
            "workloads": [
                {"name": "early", "replicas": 0, "requests": small},
                {"name": "late", "replicas": 0, "requests": small},
            ],
            "timeline": [
                {"at": "1m", "scale": {"workload": "early", "replicas": 7}},
                {"at": "3m", "scale": {"workload": "late", "replicas": 6}},
                {"at": "10m", "scale": {"workload": "early", "replicas": 1}},
                {"at": "10m", "scale": {"workload": "late", "replicas": 1}},
            ],
        },
    }


def test_the_services_carry_a_command_across_pools_out_as_one():
    log = Runner(parse_scenario(two_pool_day({"cpu": "4"})), seed=11).play().log
    kinds = [(e.type, e.data) for e in log]
    decided = [d for t, d in kinds if t == "DisruptionDecided"]
    assert [(d["nodepool"], d["consolidation_type"]) for d in decided] == [("a", "multi"), ("b", "multi")]
    ids = [d["decision_id"] for d in decided]
    assert all(d["command_parts"] == ids for d in decided) and decided[1]["replacements"] == []
    completed = [d["decision_id"] for t, d in kinds if t == "DisruptionCompleted"]
    assert completed == ids  # together, in one append
    (replacement,) = decided[0]["replacements"]
    ended = {d["nodeclaim"] for t, d in kinds if t == "NodeClaimTerminated"}
    assert ended == {name for d in decided for name in d["candidates"]}
    assert replacement not in ended and "DisruptionCancelled" not in {t for t, _ in kinds}


def test_no_graceful_command_is_computed_while_another_awaits_its_recheck():
    """Pool a's node hard limit keeps the replacement out of it, so single-node consolidation
    works pool by pool: a command computed in b while a's awaited its re-check planned around a's
    candidate, and each re-check cancelled the other's, for ever."""
    log = Runner(parse_scenario(two_pool_day({"nodes": "1"})), seed=11).play().log
    types = [e.type for e in log]
    assert types.count("DisruptionCancelled") <= 1 and types.count("DisruptionDecided") <= 3
    live = {e.data["nodeclaim"] for e in log if e.type == "NodeClaimLaunched"}
    live -= {e.data["nodeclaim"] for e in log if e.type == "NodeClaimTerminated"}
    assert len(live) == 1
