"""Disruption's metrics, in upstream's names and labels (`karpenter_voluntary_disruption_*`,
`karpenter_nodeclaims_disrupted_total`, `karpenter_pods_disruption_initiated_total`, the NodePool
budget gauges, `karpenter_nodeclaims_created_total` for replacements), registered on the
service's own registry. The label values follow upstream's: reasons lowercased for decisions,
snake_cased for disruptions (`pretty.ToSnakeCase`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DURATION_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    *(1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60),
    *(120, 150, 300, 450, 600),
)
"""Upstream's `DurationBuckets` (controller-runtime's, with the long tail)."""
_DISRUPTED = ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"]
GRACEFUL_MODE, EVENTUAL_MODE = "graceful", "eventual"
"""`termination_mode`: the claim has no terminationGracePeriod (graceful), or has one (eventual)."""


def snake(name: str) -> str:
    """Upstream's `pretty.ToSnakeCase`: `WhenEmptyOrUnderutilized` -> `when_empty_or_underutilized`."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


@dataclass(frozen=True)
class DisruptionMetrics:
    leader: Gauge
    decisions: Counter
    decisions_by_nodepool: Counter
    disrupted: Counter
    pods_disrupted: Counter
    created: Counter
    allowed: Gauge
    consuming: Gauge
    eligible: Gauge
    evaluation: Histogram
    failed_validations: Counter
    queue_failures: Counter
    validation_attempts: Counter
    unhealthy_disrupted: Counter
    repair_blocked: Counter

    @classmethod
    def on(cls, registry: CollectorRegistry) -> DisruptionMetrics:
        return cls(
            leader=Gauge("nodewright_disruption_leader", "1 while this replica decides.", registry=registry),
            decisions=Counter(
                "karpenter_voluntary_disruption_decisions_total",
                "Disruption decisions taken.",
                ["decision", "reason", "consolidation_type"],
                registry=registry,
            ),
            decisions_by_nodepool=Counter(
                "karpenter_voluntary_disruption_decisions_by_nodepool_total",
                "Disruption decisions taken, once per NodePool of the candidates.",
                ["nodepool", "decision", "reason", "consolidation_type"],
                registry=registry,
            ),
            disrupted=Counter(
                "karpenter_nodeclaims_disrupted_total",
                "NodeClaims handed to termination by a disruption.",
                _DISRUPTED,
                registry=registry,
            ),
            pods_disrupted=Counter(
                "karpenter_pods_disruption_initiated_total",
                "Reschedulable pods on the NodeClaims handed to termination by a disruption.",
                _DISRUPTED,
                registry=registry,
            ),
            created=Counter(
                "karpenter_nodeclaims_created_total",
                "Replacement NodeClaims created by a disruption.",
                ["reason", "nodepool", "min_values_relaxed"],
                registry=registry,
            ),
            allowed=Gauge(
                "karpenter_nodepools_allowed_disruptions",
                "Disruptions a NodePool's budgets allow now.",
                ["nodepool", "reason"],
                registry=registry,
            ),
            consuming=Gauge(
                "karpenter_nodepools_nodes_consuming_budgets",
                "A NodePool's nodes counting against its budgets.",
                ["nodepool", "reason"],
                registry=registry,
            ),
            eligible=Gauge(
                "karpenter_voluntary_disruption_eligible_nodes",
                "Candidates a method could take in the last pass.",
                ["reason"],
                registry=registry,
            ),
            evaluation=Histogram(
                "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
                "Duration of one method's evaluation in a disruption pass.",
                ["reason", "consolidation_type"],
                buckets=DURATION_BUCKETS,
                registry=registry,
            ),
            failed_validations=Counter(
                "karpenter_voluntary_disruption_failed_validations_total",
                "Candidates of a graceful command that failed its validation.",
                ["consolidation_type"],
                registry=registry,
            ),
            queue_failures=Counter(
                "karpenter_voluntary_disruption_queue_failures_total",
                "Replacements of a validated command that did not initialize, the command cancelled.",
                ["decision", "reason", "consolidation_type"],
                registry=registry,
            ),
            validation_attempts=Counter(
                "nodewright_disruption_validation_attempts_total",
                "Graceful commands re-checked after their validation delay, by result.",
                ["result"],
                registry=registry,
            ),
            unhealthy_disrupted=Counter(
                "karpenter_nodeclaims_unhealthy_disrupted_total",
                "Unhealthy NodeClaims node repair disrupted, by the condition that made them so.",
                ["condition", "nodepool", "capacity_type", "image_id"],
                registry=registry,
            ),
            repair_blocked=Counter(
                "nodewright_node_repair_blocked_total",
                "Unhealthy nodes due for repair that their NodePool's unhealthy threshold held back, "
                "counted when a block begins.",
                ["nodepool"],
                registry=registry,
            ),
        )
