"""The what-if end to end, offline: a short two-pool day recorded by the runner, its demand rebuilt
from the log, and replayed with the recorded NodePools and with changed ones.

The record here is the runner's own (a `nodewright run` takes minutes of wall time): the
baseline is held to the tolerances against it all the same, through the demand the log implies."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from services.whatif.replay import play, whatif, with_catalog
from services.whatif.runner import Runner
from shared.api.scenario import parse_scenario
from shared.whatif.changes import changed
from shared.whatif.compare import fidelity
from shared.whatif.demand import demand_of
from shared.whatif.figures import UNPLACED, figures
from tests.whatif_pools import nodepool

pytestmark = pytest.mark.timeout(300)
ID = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}|(?<=-)[0-9a-f]{8}\b")
DAY = {
    "apiVersion": "nodewright.dev/v1alpha1",
    "kind": "Scenario",
    "metadata": {"name": "whatif-day"},
    "spec": {
        "start": "2026-11-23T09:00:00Z",
        "duration": "30m",
        "seed": 3,
        "cloud": {"instanceTypes": 60, "launchLatency": "20s", "registrationLatency": "10s"},
        "nodePools": [nodepool("web", 50, "3", "2", "web"), nodepool("batch", 10, "10", "1", "batch")],
        "workloads": [
            {
                "name": "front",
                "replicas": 0,
                "requests": {"cpu": "1", "memory": "1Gi"},
                "nodeSelector": {"tier": "web"},
            },
            {"name": "misc", "replicas": 0, "requests": {"cpu": "500m", "memory": "512Mi"}},
            {
                "name": "jobs",
                "replicas": 0,
                "requests": {"cpu": "1", "memory": "1Gi"},
                "nodeSelector": {"tier": "batch"},
            },
        ],
        "timeline": [
            {"at": "1m", "scale": {"workload": "front", "replicas": 14}},
            {"at": "1m", "scale": {"workload": "jobs", "replicas": 5}},
            {"at": "1m", "scale": {"workload": "misc", "replicas": 2}},
            {"at": "15m", "scale": {"workload": "front", "replicas": 2}},
        ],
    },
}


@pytest.fixture(scope="module")
def recorded() -> list[Any]:
    return Runner(parse_scenario(DAY), seed=11).play().log


@pytest.fixture(scope="module")
def replayed(recorded):
    demand = demand_of(recorded)
    document = with_catalog(demand)
    base = figures(play(document).log, demand.start, demand.end)
    return demand, document, base


def variant(document, pools=(), drop=()):
    return play(changed(document, list(pools), list(drop)))


def test_the_baseline_is_faithful_to_the_record(recorded, replayed):
    demand, _, base = replayed
    record = figures(recorded, demand.start, demand.end)
    out = fidelity(record, base)
    assert out["faithful"], out["beyond"]
    assert base["web"].disruptions, "the day consolidates web: the changes below must have something to remove"


def test_a_zero_budget_stops_its_pools_consolidation_only(replayed):
    demand, document, base = replayed
    frozen = nodepool("web", 50, "3", "0", "web")
    after = figures(variant(document, [("web.yaml", frozen)]).log, demand.start, demand.end)
    assert not {"Empty", "Underutilized"} & set(after["web"].disruptions)
    assert after["web"].node_hours > base["web"].node_hours
    assert after["batch"].to_dict() == base["batch"].to_dict()


def test_a_raised_node_limit_shortens_the_wait(replayed):
    demand, document, base = replayed
    assert base[UNPLACED].pending_pod_minutes > 10, "front's pods wait for web's limit until the scale down"
    raised = nodepool("web", 50, "12", "2", "web")
    after = figures(variant(document, [("web.yaml", raised)]).log, demand.start, demand.end)
    assert UNPLACED not in after, "with room under the limit, every pod runs in web"
    assert after["web"].longest_wait_minutes < 2, "a pod waits only for its node to come up"
    assert after["web"].peak_nodes > base["web"].peak_nodes


def test_a_dropped_pools_pods_go_to_the_next_by_weight_or_wait(recorded):
    """misc (no selector) moves to batch, the next pool by weight; front (tier: web) fits no
    other pool and waits to the end; the notes say both."""
    out = whatif(recorded, drop=["web"])
    changed_pools = out["changed"]["pools"]
    assert "web" not in changed_pools
    assert changed_pools[UNPLACED]["pending_pod_minutes"] > 0
    (note,) = out["notes"]
    assert note.startswith("web dropped: front fits no other pool: it waits; misc went to batch ("), note
    assert out["fidelity"]["faithful"], out["fidelity"]["beyond"]


def test_two_plays_of_one_input_are_equal():
    scenario = parse_scenario(copy.deepcopy(DAY))
    until = scenario.instant("8m")
    one = Runner(scenario, seed=5).play(until).log
    two = Runner(parse_scenario(copy.deepcopy(DAY)), seed=5).play(until).log
    assert [(e.type, e.stream_id, e.data) for e in one] == [(e.type, e.stream_id, e.data) for e in two]


def test_passes_only_when_their_inputs_moved_change_nothing():
    """A disruption pass or a scheduling pass skipped because the log, the budget windows, the
    Consolidatable instants, the expiries and the skipped offerings are those of the last one
    leaves the same log as a pass on every 10 s step (consolidation and a limit stop included)."""
    until = parse_scenario(copy.deepcopy(DAY)).instant("20m")
    every = Runner(parse_scenario(copy.deepcopy(DAY)), seed=5, every_pass=True)
    watched = Runner(parse_scenario(copy.deepcopy(DAY)), seed=5)
    one, two = every.play(until).log, watched.play(until).log
    assert any(e.type == "DisruptionDecided" for e in one), "the window must consolidate something"
    assert _named_in_order(one) == _named_in_order(two)
    assert watched.passes < every.passes / 5


def _named_in_order(log: list[Any]) -> list[str]:
    """The log with each id (and the claim names made of one) replaced by its order of first
    appearance: a scheduling pass skipped draws no reconcile id, so later ids come out shifted."""
    seen: dict[str, str] = {}

    def name(match: re.Match[str]) -> str:
        return seen.setdefault(match.group(0), f"id{len(seen)}")

    return [ID.sub(name, json.dumps([e.type, e.stream_id, e.occurred_at.isoformat(), e.data])) for e in log]
