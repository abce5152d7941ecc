"""A short day recorded offline for the `explain` tests: one NodePool per answer `explain` must
give, each with its own tier label and workload (4-cpu on-demand nodes of the sim).

- held: a pod annotated karpenter.sh/do-not-disrupt holds its node;
- frozen: its pods go at 5m, inside a budget of 0 scheduled 03:00-05:00 America/Chicago;
- slow: consolidateAfter 1h, a pod deleted at 10m;
- tight: one 3-cpu pod on the cheapest node that holds it;
- guarded: a pod whose PodDisruptionBudget allows no eviction;
- capped: 2- or 4-cpu nodes and limits.nodes 2 (Hard), scaled from 6 pods to 4 at 15m: the
  node left with one pod would be replaced by a cheaper one, which the limit has no room for;
- web: 2- or 4-cpu nodes, scaled from 6 pods to 1 at 15m: one node emptied (Empty), the other
  replaced by a cheaper 2-cpu one (Underutilized).
"""

from __future__ import annotations

import copy
from typing import Any

from tests.whatif_pools import nodepool


def _pool(
    name: str, weight: int, cpus: tuple[str, ...] = ("4",), nodes: str = "10", **disruption: Any
) -> dict[str, Any]:
    pool = nodepool(name, weight, nodes, "10", name)
    pool["spec"]["disruption"].update(disruption)
    pool["spec"]["template"]["spec"]["requirements"][0]["values"] = list(cpus)
    return pool


def _workload(name: str, replicas: int, cpu: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "requests": {"cpu": cpu, "memory": "512Mi"},
        "nodeSelector": {"tier": extra.pop("tier", name)},
        **extra,
    }


FROZEN_BUDGET = {"nodes": "0", "schedule": "0 3 * * *", "duration": "2h", "timeZone": "America/Chicago"}
DAY: dict[str, Any] = {
    "apiVersion": "nodewright.dev/v1alpha1",
    "kind": "Scenario",
    "metadata": {"name": "explain-day"},
    "spec": {
        "start": "2026-11-23T09:00:00Z",
        "duration": "30m",
        "seed": 0,
        "cloud": {"instanceTypes": 60, "launchLatency": "20s", "registrationLatency": "10s"},
        "nodePools": [
            _pool("held", 50),
            _pool("frozen", 40, budgets=[FROZEN_BUDGET]),
            _pool("slow", 30, consolidateAfter="1h"),
            _pool("tight", 20),
            _pool("guarded", 15),
            _pool("capped", 12, ("2", "4"), nodes="2"),
            _pool("web", 10, ("2", "4")),
        ],
        "workloads": [
            _workload("held", 1, "1", annotations={"karpenter.sh/do-not-disrupt": "true"}),
            _workload("frozen", 0, "1"),
            _workload("slow", 0, "1"),
            _workload("tight", 1, "3"),
            _workload("guarded", 1, "1", pdb={"maxUnavailable": 0}),
            _workload("capped", 0, "1"),
            _workload("web", 0, "1"),
        ],
        "timeline": [
            {"at": "1m", "scale": {"workload": "frozen", "replicas": 2}},
            {"at": "1m", "scale": {"workload": "slow", "replicas": 2}},
            {"at": "1m", "scale": {"workload": "web", "replicas": 6}},
            {"at": "1m", "scale": {"workload": "capped", "replicas": 6}},
            {"at": "5m", "scale": {"workload": "frozen", "replicas": 0}},
            {"at": "10m", "scale": {"workload": "slow", "replicas": 1}},
            {"at": "15m", "scale": {"workload": "web", "replicas": 1}},
            {"at": "15m", "scale": {"workload": "capped", "replicas": 4}},
        ],
    },
}


def day() -> dict[str, Any]:
    return copy.deepcopy(DAY)
