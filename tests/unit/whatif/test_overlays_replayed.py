"""NodeOverlays in a recorded run and its replay: the runner (the services offline) records the
scenario's overlay and launches the family it made cheaper; the demand rebuilt from that log
carries the overlay, so the replay launches alike."""

from __future__ import annotations

import pytest

from services.whatif.replay import play
from services.whatif.runner import Runner
from shared.api.scenario import parse_scenario
from shared.whatif.demand import demand_of
from tests.factories import scenario_doc
from tests.whatif_pools import nodepool

pytestmark = pytest.mark.timeout(120)
FAMILY = "sim.nodewright.dev/instance-family"
OVERLAY = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "half-r5"},
    "spec": {"requirements": [{"key": FAMILY, "operator": "In", "values": ["r5"]}], "priceAdjustment": "-90%"},
}


def launched(log) -> set[str]:
    return {e.data["instance_type"] for e in log if e.type == "NodeClaimLaunched"}


def day(**spec) -> dict:
    return scenario_doc(
        "overlaid",
        duration="10m",
        cloud={"instanceTypes": 60, "launchLatency": "20s", "registrationLatency": "10s"},
        nodePools=[nodepool("web", 50, "3", "2", "web")],
        workloads=[
            {"name": "front", "replicas": 2, "requests": {"cpu": "1", "memory": "1Gi"}, "nodeSelector": {"tier": "web"}}
        ],
        **spec,
    )


def test_a_recorded_overlay_is_replayed_with_the_demand():
    plain = launched(Runner(parse_scenario(day())).play().log)
    assert plain and not any(t.startswith("r5.") for t in plain)
    recorded = Runner(parse_scenario(day(nodeOverlays=[OVERLAY]))).play().log
    assert [e.type for e in recorded if e.type.startswith("NodeOverlay")] == ["NodeOverlayApplied"]
    assert launched(recorded) and all(t.startswith("r5.") for t in launched(recorded))
    demand = demand_of(recorded)
    assert [o["metadata"]["name"] for o in demand.document["spec"]["nodeOverlays"]] == ["half-r5"]
    assert launched(play(demand.document).log) == launched(recorded)
