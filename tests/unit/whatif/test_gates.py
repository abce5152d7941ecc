"""The feature gates where a scenario or a what-if admits and plays NodePools, as the services
do: a static pool needs `StaticCapacity` in a scenario file as at the API, the what-if plays by the
gates the recording services took, and node repair comes on time offline, where no other event
wakes the pass."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli.main import app
from cli.whatif import render
from services.whatif.replay import whatif
from services.whatif.runner import STEP, Runner
from shared.api.scenario import ScenarioError, parse_scenario
from shared.config import NODE_REPAIR, STATIC_CAPACITY, feature_gates
from shared.runtime.scenarios import load_scenario
from shared.whatif.changes import ChangeError
from tests.conftest import nodepool_doc
from tests.factories import gates_recorded, scenario_doc

pytestmark = pytest.mark.timeout(300)
FORBIDDEN = "Forbidden: static NodePools require the StaticCapacity feature gate"


def static(replicas: int, nodes: str = "10", name: str = "s") -> dict[str, Any]:
    return nodepool_doc(**{"metadata.name": name, "spec.replicas": replicas, "spec.limits": {"nodes": nodes}})


STATIC = scenario_doc(
    "static",
    duration="20m",
    nodePools=[static(3)],
    workloads=[{"name": "w", "replicas": 1, "requests": {"cpu": "100m"}}],
    timeline=[{"at": "10m", "applyNodePool": static(2)}],
)


@pytest.mark.parametrize(
    ("gate", "refused"),
    [
        (False, ["spec.nodePools[0].spec.replicas", "spec.timeline[0].applyNodePool.spec.replicas"]),
        (True, []),
        (None, []),
    ],
)
def test_a_scenario_admits_a_static_pool_only_with_the_gate(gate, refused):
    if not refused:
        assert parse_scenario(copy.deepcopy(STATIC), static_capacity=gate).nodepools[0].spec.replicas == 3
        return
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(copy.deepcopy(STATIC), static_capacity=gate)
    assert [e.path for e in caught.value.errors] == refused
    assert all(FORBIDDEN in e.message for e in caught.value.errors)


def test_a_scenario_file_is_admitted_by_the_environments_gates(tmp_path: Path, monkeypatch):
    path = tmp_path / "static.yaml"
    path.write_text(yaml.safe_dump(STATIC))
    monkeypatch.delenv("NODEWRIGHT_FEATURE_GATES", raising=False)
    with pytest.raises(ScenarioError, match="StaticCapacity feature gate"):
        load_scenario(path)
    monkeypatch.setenv("NODEWRIGHT_FEATURE_GATES", "StaticCapacity=true")
    assert load_scenario(path).nodepools[0].spec.replicas == 3
    with pytest.raises(ScenarioError, match="StaticCapacity feature gate"):
        load_scenario(path, gates=feature_gates("StaticCapacity=false"))  # the given gates, not the environment's


@pytest.fixture(scope="module")
def static_log() -> list[Any]:
    """A day a static pool was played with the gate on: 3 nodes, then 2."""
    return Runner(parse_scenario(copy.deepcopy(STATIC)), seed=3, static_capacity=True).play().log


def test_the_what_if_plays_by_the_recording_services_gates(static_log):
    with pytest.raises(ScenarioError, match="StaticCapacity feature gate"):
        whatif(static_log)  # the default gates: a static pool is refused, never played as a dynamic one
    on = feature_gates("StaticCapacity=true")
    result = whatif(static_log, [("more.yaml", static(5))], gates=on)
    baseline, changed = result["baseline"]["pools"]["s"], result["changed"]["pools"]["s"]
    assert baseline["peak_nodes"] == 3 and changed["peak_nodes"] == 5
    assert baseline["disruptions"] == {"Overprovisioned": 1}  # 3 down to 2, as recorded
    assert changed["disruptions"] == {}  # 5 replicas throughout: the recorded scale-down is the change's
    with pytest.raises(ChangeError, match=r"more\.yaml: NodePool s is not valid: spec\.replicas: Forbidden"):
        whatif(static_log, [("more.yaml", static(5))], gates={**on, STATIC_CAPACITY: False})
    assert result["fidelity"]["gates"] == {"on": ["StaticCapacity"], "source": "given", "from": "given by the caller"}


def test_the_what_if_plays_by_the_gates_the_log_recorded_over_the_environments(static_log):
    """The record says StaticCapacity was on; the environment replaying it has it off."""
    log = gates_recorded(static_log, feature_gates("StaticCapacity=true"))
    result = whatif(log, [("more.yaml", static(5))], environment=feature_gates(""))
    said = result["fidelity"]["gates"]
    assert (said["on"], said["source"]) == (["StaticCapacity"], "log")
    assert said["from"] == (
        f"the log: recorded at {log[-1].occurred_at.isoformat()}, the first record, after the instant replayed"
    )  # a service records them when it leads, a moment after the log's first facts
    assert result["changed"]["pools"]["s"]["peak_nodes"] == 5
    assert result["baseline"]["pools"]["s"]["disruptions"] == {"Overprovisioned": 1}
    assert f"  feature gates StaticCapacity ({said['from']})" in render(result)
    with pytest.raises(ScenarioError, match="StaticCapacity feature gate"):  # recorded off, on here: off
        whatif(gates_recorded(static_log, feature_gates("")), environment=feature_gates("StaticCapacity=true"))


def test_a_log_that_records_no_gates_plays_by_the_environments_and_says_so(static_log):
    result = whatif(static_log, environment=feature_gates("StaticCapacity=true"))
    said = result["fidelity"]["gates"]
    assert (said["on"], said["source"]) == (["StaticCapacity"], "environment")
    assert "  feature gates StaticCapacity (the environment (NODEWRIGHT_FEATURE_GATES): the log records none)" in (
        render(result)
    )


def test_the_command_prints_where_its_gates_came_from(static_log, tmp_path: Path):
    path = tmp_path / "day.jsonl"
    log = gates_recorded(static_log, feature_gates("StaticCapacity=true"))
    path.write_text("".join(json.dumps(e.to_json_dict()) + "\n" for e in log))
    said = CliRunner().invoke(
        app, ["whatif", "--from-file", str(path), "--output", "json"], env={"NODEWRIGHT_FEATURE_GATES": ""}
    )
    assert said.exit_code == 0, said.stderr
    gates = json.loads(said.stdout)["fidelity"]["gates"]
    assert (gates["on"], gates["source"]) == (["StaticCapacity"], "log")


REPAIR = scenario_doc(
    "repair",
    duration="1h",
    nodePools=[nodepool_doc(**{"metadata.name": "p", "spec.disruption": {"budgets": [{"nodes": "0"}]}})],
    workloads=[{"name": "w", "replicas": 2, "requests": {"cpu": "100m"}}],
    timeline=[{"at": "5m", "nodesNotReady": {"nodepool": "p", "count": 1}}],
)


def test_an_unhealthy_node_is_repaired_when_its_toleration_ends_though_nothing_else_happens():
    scenario = parse_scenario(copy.deepcopy(REPAIR))
    log = Runner(scenario, seed=3, node_repair=feature_gates("NodeRepair=true")[NODE_REPAIR]).play().log
    (decided,) = [e for e in log if e.type == "DisruptionDecided"]
    assert decided.data["reason"] == "Unhealthy" and decided.data["forceful"]
    due = scenario.instant("5m") + timedelta(minutes=30)  # the sim's provider: Ready Unknown for 30 minutes
    assert due <= decided.occurred_at < due + 2 * STEP
    assert [
        e for e in Runner(parse_scenario(copy.deepcopy(REPAIR)), seed=3).play().log if e.type == "DisruptionDecided"
    ] == []
