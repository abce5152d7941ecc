"""A NodePool of the what-if tests' two-pool days: 4-cpu on-demand nodes of the sim, a tier label,
consolidation at once, one budget and a node limit."""

from __future__ import annotations

from typing import Any

CLASS = {"group": "sim.nodewright.dev", "kind": "SimNodeClass", "name": "default"}


def nodepool(name: str, weight: int, nodes: str, budget: str, label: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "weight": weight,
            "template": {
                "metadata": {"labels": {"tier": label}},
                "spec": {
                    "nodeClassRef": CLASS,
                    "requirements": [
                        {"key": "sim.nodewright.dev/instance-cpu", "operator": "In", "values": ["4"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "0s",
                "budgets": [{"nodes": budget}],
            },
            "limits": {"nodes": nodes},
        },
    }
