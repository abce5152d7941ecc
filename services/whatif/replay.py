"""A what-if from a recorded log: the demand rebuilt (`shared.whatif.demand`), played twice on
the offline runner (recorded NodePools, then changed ones), each measured by the same fold
(`shared.whatif.figures`), and the baseline held against the record first
(`shared.whatif.compare`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from services.whatif import gates as g
from services.whatif.catalog import catalog_for
from services.whatif.runner import Played, Runner
from shared.api.scenario import parse_scenario
from shared.config import NODE_REPAIR, SPOT_TO_SPOT_CONSOLIDATION, STATIC_CAPACITY, feature_gates
from shared.events.envelope import Entry
from shared.whatif.changes import changed, pool_names
from shared.whatif.compare import difference, fidelity
from shared.whatif.demand import Demand, demand_of
from shared.whatif.figures import UNPLACED, figures, nodes_over_time, placements
from shared.whatif.sim import UNKNOWN, SimSettings


def with_catalog(demand: Demand, sim: SimSettings = UNKNOWN) -> dict[str, Any]:
    """The document at the recorded run's seed (`sim`: it draws the catalog's prices, the
    instance ids and which instances a reclaim takes), with the run's catalog and zones when
    `sim` knows them, else the smallest sim catalog that holds every instance type the log names
    (the sim's catalog is generated in a fixed order, so the recorded run's held them all; the
    types a recorded claim could take are all named in its NodeClaimCreated): then a changed pool
    asking for types no recorded claim could take may find fewer than the recorded run had."""
    document = demand.document
    count = len(catalog_for(demand.instance_types, demand.zones, sim))
    cloud = {**document["spec"]["cloud"], "instanceTypes": count}
    if sim.zones:
        cloud["zones"] = list(sim.zones)
    return {**document, "spec": {**document["spec"], "seed": sim.seed, "cloud": cloud}}


def play(document: dict[str, Any], gates: Mapping[str, bool] | None = None) -> Played:
    """The document played on the offline runner with the feature gates the services would take
    (`gates`, else upstream's defaults): its NodePools admitted by them, its passes run by them."""
    gates = gates if gates is not None else feature_gates("")
    scenario = parse_scenario(document, static_capacity=gates[STATIC_CAPACITY])
    return Runner(
        scenario,
        static_capacity=gates[STATIC_CAPACITY],
        node_repair=gates[NODE_REPAIR],
        spot_to_spot=gates[SPOT_TO_SPOT_CONSOLIDATION],
    ).play()


def whatif(
    entries: Sequence[Entry],
    nodepools: Sequence[tuple[str, Any]] = (),
    drop: Sequence[str] = (),
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    sim: SimSettings = UNKNOWN,
    gates: Mapping[str, bool] | None = None,
    environment: Mapping[str, bool] | None = None,
) -> dict[str, Any]:
    """`fidelity`, `baseline`, `changed`, `seconds` (what `--output json` prints, docs/whatif.md),
    and for the text and the report: `difference`, `notes` (where a dropped pool's pods went),
    `pools`, `series` (nodes per pool over time, each variant). `sim`: the recorded run's seed
    and catalog, and where they came from (the fidelity section says both). `gates`: the feature
    gates both plays run by; default: those the log recorded in force at the replay's start (the
    disruption service's), else `environment` (the command's NODEWRIGHT_FEATURE_GATES), else
    upstream's defaults; the fidelity section says which (`gates`)."""
    began = time.perf_counter()
    demand = demand_of(entries, start=start, end=end)
    used = _gates(entries, demand.start, gates, environment)
    gates = used.gates
    document = with_catalog(demand, sim)
    variant = changed(document, nodepools, drop, static_capacity=gates[STATIC_CAPACITY])  # fails before any play
    recorded = figures(entries, demand.start, demand.end)
    base = play(document, gates)
    baseline = figures(base.log, demand.start, demand.end)
    after = play(variant, gates)
    changed_figures = figures(after.log, demand.start, demand.end)
    notes = dropped(drop, base.log, after.log, changed_figures)
    return {
        "fidelity": {**fidelity(recorded, baseline, sim), "gates": used.to_dict()},
        "baseline": {"pools": {p: f.to_dict() for p, f in baseline.items()}},
        "changed": {"pools": {p: f.to_dict() for p, f in changed_figures.items()}},
        "difference": difference(baseline, changed_figures),
        "notes": notes,
        "pools": sorted(pool_names(document)),
        "seconds": round(time.perf_counter() - began, 2),
        "series": {"baseline": nodes_over_time(base.log), "changed": nodes_over_time(after.log)},
    }


def _gates(
    entries: Sequence[Entry], start: datetime, gates: Mapping[str, bool] | None, environment: Mapping[str, bool] | None
) -> g.Used:
    """The gates given; else those the log recorded in force at `start`; else the fallback."""
    if gates is not None:
        return g.given(gates)
    if environment is not None:
        return g.used(entries, start, lambda: environment)
    return g.used(entries, start, lambda: feature_gates(""), g.DEFAULTS)


def dropped(drop: Sequence[str], baseline: Sequence[Entry], after: Sequence[Entry], figures_: Any) -> list[str]:
    """For each dropped pool, per workload it ran in the baseline: where its pods ran instead,
    or that they waited."""
    before, now = placements(baseline), placements(after)
    left = figures_.get(UNPLACED)
    waiting = f"{left.pending_pod_minutes:g} pod-minutes pending in all" if left else "no pod waited unplaced"
    notes = []
    for name in drop:
        moved = []
        for owner, pools in sorted(before.items()):
            if pools.get(name):
                went = sorted(p for p in now.get(owner, {}) if p != UNPLACED)
                moved.append(f"{owner} went to {', '.join(went)}" if went else f"{owner} fits no other pool: it waits")
        notes.append(f"{name} dropped: {'; '.join(moved) or 'it ran no pods'} ({waiting})")
    return notes
