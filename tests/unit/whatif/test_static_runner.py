"""Static capacity through the services' own controllers, played offline (`services.whatif.runner`
with the `StaticCapacity` gate): a pool of `replicas: 5` under `limits.nodes: 4` holds 4 however
many pods wait for it, raised to 10 it has 5, and scaled to 2 it loses 3 by one forceful
`Overprovisioned` decision; with the gate off nothing is made for it."""

from __future__ import annotations

import copy
from typing import Any

from services.whatif.runner import Runner
from shared.api.scenario import parse_scenario
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc


def static(replicas: int, nodes: str) -> dict[str, Any]:
    return nodepool_doc(**{"metadata.name": "s", "spec.replicas": replicas, "spec.limits": {"nodes": nodes}})


DOCUMENT = scenario_doc(
    "static",
    duration="30m",
    nodePools=[static(5, "4")],
    workloads=[
        {"name": "huge", "replicas": 3, "requests": {"cpu": "512"}, "nodeSelector": {"karpenter.sh/nodepool": "s"}}
    ],
    timeline=[
        {"at": "10m", "applyNodePool": static(5, "10")},
        {"at": "20m", "applyNodePool": static(2, "10")},
    ],
)


def live(log: list[Any]) -> int:
    made = sum(1 for e in log if e.type == "NodeClaimCreated")
    return made - sum(1 for e in log if e.type in ("NodeClaimTerminated", "NodeClaimLaunchFailed"))


def test_a_static_pool_holds_at_its_limit_grows_to_its_replicas_and_scales_down():
    scenario = parse_scenario(copy.deepcopy(DOCUMENT))
    runner = Runner(scenario, seed=3, static_capacity=True)
    seen = {}
    marks = {scenario.instant("9m"): "at the limit", scenario.instant("19m"): "grown"}

    def observe(now: Any) -> None:
        if now in marks:
            seen[marks[now]] = live(runner.store.log)

    log = runner.play(observe=observe).log
    assert seen == {"at the limit": 4, "grown": 5} and live(log) == 2
    created = [e.data for e in log if e.type == "NodeClaimCreated"]
    assert len(created) == 5 and all(c["pods"] == [] for c in created)  # the huge pods never made it grow
    (decision,) = [e.data for e in log if e.type == "DisruptionDecided"]
    assert decision["reason"] == "Overprovisioned" and decision["forceful"] and len(decision["candidates"]) == 3


def test_with_the_gate_off_a_static_pool_gets_nothing():
    scenario = parse_scenario(copy.deepcopy(DOCUMENT))
    log = Runner(scenario, seed=3).play(scenario.instant("12m")).log
    assert [e for e in log if e.type == "NodeClaimCreated"] == []
