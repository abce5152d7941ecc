"""The equivalence check: the indexed pass (`shared.scheduling.packing.schedule`) and the oracle
baseline (`baseline_pass`, the pass before the index) must make the same plan for the same input.
`schedule` here runs both, compares, and returns the indexed pass's plan, so every reference
case in `test_packing` is an equivalence case as well."""

from __future__ import annotations

from typing import Any

from shared.scheduling import packing
from shared.scheduling.values import Plan
from tests.unit.scheduling import baseline_pass


def shape(plan: Any) -> tuple[Any, ...]:
    """Everything a plan says: placements, each claim (pods in order, use, requirements, the
    types, zones and capacity types it names), the unplaced pods with their reasons, the ignored."""
    claims = [
        (
            c.id,
            c.nodepool,
            c.pods,
            c.used,
            sorted(map(str, c.requirements.values())),
            c.instance_types,
            c.zones(),
            c.capacity_types(),
        )
        for c in plan.claims
    ]
    return plan.placed, claims, plan.unplaced, plan.ignored


def schedule(pods: Any, nodes: Any, pools: Any, catalog: Any, **kw: Any) -> Plan:
    pods, nodes, pools = list(pods), list(nodes), list(pools)
    if "running" in kw:
        kw["running"] = list(kw["running"])
    new = packing.schedule(pods, nodes, pools, catalog, **kw)
    old = baseline_pass.schedule(pods, nodes, pools, catalog, **kw)
    assert shape(new) == shape(old)
    return new
