"""Scenario files: every example loads and plays; bad input is refused with field paths."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from services.sim.world import World
from shared.api.scenario import ScenarioError, parse_scenario, validate_scenario
from shared.runtime.scenarios import load_scenario
from tests.conftest import ROOT, nodepool_doc
from tests.factories import scenario_doc

EXAMPLES = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))

BASE = scenario_doc(
    nodePools=[nodepool_doc(**{"metadata.name": "a"})],
    workloads=[{"name": "web", "replicas": 2, "requests": {"cpu": "1"}}],
    timeline=[{"at": "5m", "scale": {"workload": "web", "replicas": 4}}],
)


def test_there_are_the_four_required_examples():
    assert {p.stem for p in EXAMPLES} >= {
        "burst-node-limit",
        "backend1a-weekday-budget",
        "drift-rollout",
        "lowered-node-limit",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_loads_and_its_world_plays_to_the_end(path: Path):
    scenario = load_scenario(path)
    world = World(scenario)
    world.advance(scenario.end)
    assert world.next_due() is None
    pods = list(world.cluster.pods.values())
    assert all(p.labels["app"] == p.owner_name for p in pods)
    assert world.cluster.nodepools  # the pools are in the API server for the watcher


def test_the_backend1a_example_is_seed_004s_pool():
    scenario = load_scenario(ROOT / "examples/scenarios/backend1a-weekday-budget.yaml")
    (pool,) = scenario.nodepools
    budgets = pool.spec.disruption.budgets
    assert pool.name == "backend1a" and budgets[0].schedule == "0 15 * * mon-fri" and budgets[0].duration == "9h"
    assert budgets[0].reasons == ["Underutilized"] and budgets[0].nodes == "0"


def _with(change) -> dict:
    doc = copy.deepcopy(BASE)
    change(doc["spec"])
    return doc


CASES = [
    ("no start", lambda s: s.pop("start"), "spec.start", "Required value"),
    ("naive start", lambda s: s.update(start="2026-11-23T09:00:00"), "spec.start", "time zone offset"),
    ("bad duration", lambda s: s.update(duration="1 hour"), "spec.duration", "not a Go duration"),
    ("unknown field", lambda s: s.update(speed=3), "spec.speed", "unknown field"),
    (
        "invalid nodepool",
        lambda s: s["nodePools"][0]["spec"].update(limits={"cpu": "lots"}),
        "spec.nodePools[0].spec.limits[cpu]",
        "lots",
    ),
    ("two actions", lambda s: s["timeline"][0].update(deleteWorkload="web"), "spec.timeline[0]", "exactly one"),
    ("no action", lambda s: s["timeline"][0].pop("scale"), "spec.timeline[0]", "exactly one"),
    (
        "unknown workload",
        lambda s: s["timeline"][0]["scale"].update(workload="api"),
        "spec.timeline[0].scale.workload",
        "workload 'api': no such workload",
    ),
    ("late", lambda s: s["timeline"][0].update(at="2h"), "spec.timeline[0].at", "after the scenario ends"),
    (
        "unknown pool",
        lambda s: s["timeline"].append({"at": "1m", "deleteNodePool": "b"}),
        "spec.timeline[1].deleteNodePool",
        "no NodePool 'b' then",
    ),
    (
        "pdb both",
        lambda s: s["workloads"][0].update(pdb={"minAvailable": 1, "maxUnavailable": 1}),
        "spec.workloads[0].pdb",
        "exactly one of minAvailable and maxUnavailable",
    ),
    (
        "pdb bad percent",
        lambda s: s["workloads"][0].update(pdb={"minAvailable": "half"}),
        "spec.workloads[0].pdb.minAvailable",
        "percentage such as 20%",
    ),
    ("bad kind", lambda s: s["workloads"][0].update(kind="Job"), "spec.workloads[0].kind", "Unsupported value"),
    (
        "duplicate workload",
        lambda s: s["workloads"].append(dict(s["workloads"][0])),
        "spec.workloads[1].name",
        "Duplicate",
    ),
    (
        "bad request",
        lambda s: s["workloads"][0].update(requests={"cpu": "1x"}),
        "spec.workloads[0].requests[cpu]",
        "1x",
    ),
    (
        "shortage zone",
        lambda s: s.update(cloud={"insufficientCapacity": [{"zone": "moon", "from": "0s", "to": "1m"}]}),
        "spec.cloud.insufficientCapacity[0].zone",
        "not one of spec.cloud.zones",
    ),
    (
        "shortage order",
        lambda s: s.update(cloud={"insufficientCapacity": [{"from": "5m", "to": "1m"}]}),
        "spec.cloud.insufficientCapacity[0].to",
        "after `from`",
    ),
    (
        "bad capacity type",
        lambda s: s.update(cloud={"interruptions": [{"at": "1m", "capacityType": "reserved"}]}),
        "spec.cloud.interruptions[0].capacityType",
        "Unsupported value",
    ),
    (
        "no types",
        lambda s: s.update(cloud={"instanceTypes": 0}),
        "spec.cloud.instanceTypes",
        "greater than or equal to 1",
    ),
    (
        "deleted then scaled",
        lambda s: s["timeline"].insert(0, {"at": "1m", "deleteWorkload": "web"}),
        "spec.timeline[1].scale.workload",
        "deleted earlier in the timeline",
    ),
    (
        "deleted twice",
        lambda s: s["timeline"].extend([{"at": "1m", "deleteNodePool": "a"}, {"at": "2m", "deleteNodePool": "a"}]),
        "spec.timeline[2].deleteNodePool",
        "no NodePool 'a' then",
    ),
    (
        "listed after, timed before",
        lambda s: s["timeline"].extend(
            [
                {"at": "3m", "applyNodePool": nodepool_doc(**{"metadata.name": "late"})},
                {"at": "2m", "deleteNodePool": "late"},
            ]
        ),
        "spec.timeline[2].deleteNodePool",
        "no NodePool 'late' then",
    ),
    (
        "not ready in an unknown pool",
        lambda s: s["timeline"].append({"at": "1m", "nodesNotReady": {"nodepool": "b", "count": 1}}),
        "spec.timeline[1].nodesNotReady.nodepool",
        "no NodePool 'b' then",
    ),
    (
        "not ready for a bad duration",
        lambda s: s["timeline"].append({"at": "1m", "nodesNotReady": {"nodepool": "a", "count": 1, "duration": "x"}}),
        "spec.timeline[1].nodesNotReady.duration",
        "not a Go duration",
    ),
    (
        "a condition no repair policy names",
        lambda s: s["timeline"].append(
            {"at": "1m", "nodesNotReady": {"nodepool": "a", "count": 1, "condition": "MemoryPressure"}}
        ),
        "spec.timeline[1].nodesNotReady.condition",
        "must be Ready or a node monitoring agent's condition ending in Ready",
    ),
    ("start as a number", lambda s: s.update(start=0), "spec.start", "RFC 3339"),
    # Absurd sizes: refused before any process starts, never played as an empty, clean run.
    ("negative duration", lambda s: s.update(duration="-30m"), "spec.duration", "must be positive and at most 8784h"),
    ("zero duration", lambda s: s.update(duration="0s"), "spec.duration", "must be positive"),
    ("years long", lambda s: s.update(duration="1000000h"), "spec.duration", "at most 8784h (366 days)"),
    ("start in year 1", lambda s: s.update(start="0001-01-01T00:00:00Z"), "spec.start", "out of range"),
    ("start in 9999", lambda s: s.update(start="9999-12-31T23:00:00Z"), "spec.start", "before 9000-01-01"),
    (
        "a billion replicas",
        lambda s: s["workloads"][0].update(replicas=10**9),
        "spec.workloads[0].replicas",
        "must be at most 100,000 (per workload, and 1,000,000 pods in all",
    ),
    (
        "scaled to a billion",
        lambda s: s["timeline"][0]["scale"].update(replicas=10**9),
        "spec.timeline[0].scale.replicas",
        "must be at most 100,000",
    ),
    (
        "too many pods in all",
        lambda s: s.update(workloads=[{"name": f"w{i}", "replicas": 100_000} for i in range(11)]),
        "spec.workloads",
        "1,100,000 pods with each workload at its largest: at most 1,000,000",
    ),
    (
        "a billion instance types",
        lambda s: s.update(cloud={"instanceTypes": 10**9}),
        "spec.cloud.instanceTypes",
        "less than or equal to 5000",
    ),
    (
        "a thousand zones",
        lambda s: s.update(cloud={"zones": [f"z{i}" for i in range(1000)]}),
        "spec.cloud.zones",
        "at most 64 items",
    ),
    ("negative offset", lambda s: s["timeline"][0].update(at="-5m"), "spec.timeline[0].at", "at least 0s"),
    (
        "negative latency",
        lambda s: s.update(cloud={"launchLatency": "-30s"}),
        "spec.cloud.launchLatency",
        "at least 0s and at most 24h",
    ),
    (
        "a billion interruptions",
        lambda s: s.update(cloud={"interruptions": [{"at": "1m", "count": 10**9}]}),
        "spec.cloud.interruptions[0].count",
        "less than or equal to 10000",
    ),
    (
        "grace period of ages",
        lambda s: s["workloads"][0].update(terminationGracePeriodSeconds=10**20),
        "spec.workloads[0].terminationGracePeriodSeconds",
        "less than or equal to 31622400",
    ),
    (
        "a timeline of a million",
        lambda s: s.update(timeline=[{"at": "1m", "deleteWorkload": "web"}] * 10_001),
        "spec.timeline",
        "at most 10000 items",
    ),
    (
        "missing file",
        lambda s: s.update(nodePoolFiles=["nope.yaml"]),
        "spec.nodePoolFiles[0]",
        "nope.yaml",
    ),
]


@pytest.mark.parametrize(("change", "path", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_scenarios_are_refused_with_the_field_path(change, path, fragment):
    scenario, errors = validate_scenario(_with(change))
    assert scenario is None
    assert any(e.path == path and fragment in e.message for e in errors), errors
    with pytest.raises(ScenarioError, match=path.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(_with(change))


def test_nodepool_files_are_read_relative_to_the_scenario(tmp_path: Path):
    (tmp_path / "pools.yaml").write_text((ROOT / "examples/nodepools/backend1a.yaml").read_text())
    doc = _with(lambda s: s.update(nodePoolFiles=["pools.yaml"]))
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    scenario = load_scenario(path)
    assert [p.name for p in scenario.nodepools] == ["a", "backend1a"]
