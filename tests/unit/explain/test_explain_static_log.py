"""`explain` on a recorded day of a static pool (`tests.unit.whatif.test_static_runner`'s: grown
to 5 nodes, scaled to 2 at 20m by one Overprovisioned decision), with the feature gates the log
recorded, or, for a log that records none, those of `NODEWRIGHT_FEATURE_GATES` as the disruption
service reads them: on, the scale-down is weighed and a claim it took is told with its decision;
off, the static pool is explained as before, with a note that the gate is off; either way the
answer says where the gates came from."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from services.whatif.explain import explain
from services.whatif.runner import Runner
from shared.api.scenario import parse_scenario
from shared.config import feature_gates
from shared.explain import model as m
from tests.factories import gates_recorded
from tests.unit.whatif.test_static_runner import DOCUMENT

pytestmark = pytest.mark.timeout(180)
GATES = "NODEWRIGHT_FEATURE_GATES"


@pytest.fixture(scope="module")
def played():
    return Runner(parse_scenario(copy.deepcopy(DOCUMENT)), seed=3, static_capacity=True).play()


@pytest.fixture(scope="module")
def taken(played) -> tuple[list[str], list[str]]:
    """The claims the Overprovisioned decision took, and those that stayed."""
    (decision,) = [e.data for e in played.log if e.type == "DisruptionDecided"]
    made = [e.data["nodeclaim"] for e in played.log if e.type == "NodeClaimCreated"]
    return list(decision["candidates"]), [n for n in made if n not in decision["candidates"]]


def method(answer: m.Explanation, name: str) -> m.Verdict | None:
    return next((v for v in answer.methods if v.method == name), None)


def test_with_the_gate_on_a_claim_the_scale_down_took_is_told_with_its_decision(played, taken, monkeypatch):
    monkeypatch.setenv(GATES, "StaticCapacity=true")
    gone, _ = taken
    answer = explain(played.log, gone[0], sim=played.sim)
    assert answer.disrupted and answer.decision is not None and answer.decision.reason == "Overprovisioned"
    assert answer.gates == ["StaticCapacity"] and answer.notes == []
    assert answer.gates_source == "environment" and "NODEWRIGHT_FEATURE_GATES" in answer.gates_from
    scale_down = method(answer, "StaticScaleDown")
    assert scale_down is not None and scale_down.disrupts
    assert scale_down.details["count"] == 5 and scale_down.details["replicas"] == 2
    assert scale_down.details["order"] == answer.decision.candidates, "the pass replayed takes them in the same order"
    assert "this claim is 1 of 3" in scale_down.message


def test_with_the_gate_on_a_claim_that_stayed_is_within_its_replicas(played, taken, monkeypatch):
    monkeypatch.setenv(GATES, "StaticCapacity=true")
    _, stayed = taken
    answer = explain(played.log, stayed[0], sim=played.sim)
    assert not answer.disrupted
    scale_down = method(answer, "StaticScaleDown")
    assert scale_down is not None and scale_down.cause == m.WITHIN_REPLICAS
    assert "has 2 NodeClaim(s) not being deleted, replicas 2" in scale_down.message
    assert method(answer, "Consolidation").cause == m.STATIC_POOL
    assert method(answer, "Emptiness").cause == m.STATIC_POOL


def test_with_the_gate_off_the_scale_down_is_not_weighed_and_a_note_says_so(played, taken, monkeypatch):
    monkeypatch.delenv(GATES, raising=False)
    gone, _ = taken
    answer = explain(played.log, gone[0], sim=played.sim)
    assert answer.disrupted and answer.decision.reason == "Overprovisioned", "the record's decision is still told"
    assert answer.gates == [] and method(answer, "StaticScaleDown") is None
    assert [v.method for v in answer.methods] == [
        "Expiration",
        "OverLimit",
        "Emptiness",
        "StaticDrift",
        "Drift",
        "Consolidation",
    ]
    assert any("the StaticCapacity gate is off here" in n for n in answer.notes)
    assert any("Overprovisioned is behind the StaticCapacity gate" in n for n in answer.notes)
    assert not any(c.reason == "Overprovisioned" for c in answer.passed)


@pytest.fixture(scope="module")
def exported(played, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("explain-static") / "day.jsonl"
    path.write_text("".join(json.dumps(e.to_json_dict()) + "\n" for e in played.log))
    return path


def test_the_command_reads_the_gates_from_the_environment(exported, taken):
    gone, _ = taken
    argv = ["explain", "nodeclaim", gone[0], "--from-file", str(exported), "--seed", "3"]
    on = CliRunner().invoke(app, argv, env={GATES: "StaticCapacity=true"})
    assert on.exit_code == 0, on.stderr
    assert "  feature gates on: StaticCapacity (the environment (NODEWRIGHT_FEATURE_GATES)" in on.stdout
    assert "  StaticScaleDown Overprovisioned disrupts: nodepool s has 5 NodeClaim(s)" in on.stdout
    off = CliRunner().invoke(app, argv, env={GATES: ""})
    assert off.exit_code == 0 and "StaticScaleDown" not in off.stdout and "feature gates on" not in off.stdout
    bad = CliRunner().invoke(app, argv, env={GATES: "StaticCapacity=yes"})
    assert bad.exit_code == 2 and "NODEWRIGHT_FEATURE_GATES: 'StaticCapacity=yes'" in bad.stderr


def test_the_gates_the_log_recorded_are_weighed_over_the_environments(played, taken, monkeypatch):
    """The record says StaticCapacity was on; the environment replaying it has it off."""
    monkeypatch.setenv(GATES, "StaticCapacity=false")
    gone, _ = taken
    log = gates_recorded(played.log, feature_gates("StaticCapacity=true"))
    answer = explain(log, gone[0], sim=played.sim)
    assert answer.gates == ["StaticCapacity"] and answer.gates_source == "log" and answer.notes == []
    assert answer.gates_from == f"the log: recorded at {log[-1].occurred_at.isoformat()}"
    scale_down = method(answer, "StaticScaleDown")
    assert scale_down is not None and scale_down.disrupts
    monkeypatch.setenv(GATES, "StaticCapacity=true")  # and the other way round: recorded off
    off = explain(gates_recorded(played.log, feature_gates("")), gone[0], sim=played.sim)
    assert off.gates == [] and off.gates_source == "log" and method(off, "StaticScaleDown") is None
    assert any("the StaticCapacity gate is off here (as the log recorded the gates)" in n for n in off.notes)


def test_before_the_record_the_first_recorded_gates_are_taken_and_said_so(played, taken, monkeypatch):
    monkeypatch.delenv(GATES, raising=False)
    _, stayed = taken
    first = played.log[0].occurred_at
    log = gates_recorded(played.log, feature_gates("StaticCapacity=true"), at=timedelta(minutes=2))
    answer = explain(log, stayed[0], at=first + timedelta(minutes=1), sim=played.sim)
    assert answer.gates == ["StaticCapacity"] and answer.gates_source == "log"
    assert answer.gates_from.endswith("the first record, after the instant replayed")


def test_the_command_says_the_gates_came_from_the_log(played, taken, tmp_path):
    gone, _ = taken
    path = tmp_path / "day.jsonl"
    log = gates_recorded(played.log, feature_gates("StaticCapacity=true"))
    path.write_text("".join(json.dumps(e.to_json_dict()) + "\n" for e in log))
    argv = ["explain", "nodeclaim", gone[0], "--from-file", str(path), "--seed", "3"]
    said = CliRunner().invoke(app, argv, env={GATES: ""})
    assert said.exit_code == 0, said.stderr
    assert f"  feature gates on: StaticCapacity (the log: recorded at {log[-1].occurred_at.isoformat()})" in said.stdout
    assert "  StaticScaleDown Overprovisioned disrupts" in said.stdout
    document = json.loads(CliRunner().invoke(app, [*argv, "--output", "json"], env={GATES: ""}).stdout)
    assert (document["gates"], document["gates_source"]) == (["StaticCapacity"], "log")
