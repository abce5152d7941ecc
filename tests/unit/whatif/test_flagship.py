"""The flagship day (`make demo`'s three NodePools), recorded by the offline runner at its own sim
seed, then replayed by `whatif` with its own NodePools: every pool's figures within the
documented tolerances, and web's zero budget takes its consolidation away and nothing else."""

from __future__ import annotations

import pytest

from services.whatif.replay import whatif
from services.whatif.runner import Runner
from shared.api.scenario import parse_scenario
from shared.runtime.inputs import read_yaml
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(300)


def test_the_flagship_day_replays_faithfully_with_its_own_nodepools():
    (document,) = read_yaml(ROOT / "examples/scenarios/flagship-day.yaml")
    played = Runner(parse_scenario(document)).play()
    pools = {p["metadata"]["name"]: p for p in document["spec"]["nodePools"]}
    web = pools["web"]
    web["spec"]["disruption"]["budgets"] = [{"nodes": "0"}]
    result = whatif(played.log, [("web.yaml", web)], sim=played.sim)
    assert result["fidelity"]["faithful"], result["fidelity"]["beyond"]
    assert result["fidelity"]["seed"]["value"] == document["spec"].get("seed", 0)
    base, changed = result["baseline"]["pools"], result["changed"]["pools"]
    assert set(pools) <= set(base) and base["web"]["disruptions"]
    assert not {"Empty", "Underutilized", "Drifted"} & set(changed["web"]["disruptions"])
    for name in set(pools) - {"web"}:
        assert changed[name]["node_hours"] == pytest.approx(base[name]["node_hours"], rel=0.15), name
