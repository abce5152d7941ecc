"""Disruption's metrics, in upstream's names (`karpenter_voluntary_disruption_*`,
`karpenter_nodeclaims_disrupted_total`, the NodePool budget gauges), registered on the service's
own registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass(frozen=True)
class DisruptionMetrics:
    leader: Gauge
    decisions: Counter
    disrupted: Counter
    allowed: Gauge
    consuming: Gauge
    eligible: Gauge
    evaluation: Histogram
    validation_attempts: Counter

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
            disrupted=Counter(
                "karpenter_nodeclaims_disrupted_total",
                "NodeClaims handed to termination by a disruption.",
                ["reason", "nodepool", "capacity_type"],
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
                "Duration of one disruption pass.",
                ["method"],
                registry=registry,
            ),
            validation_attempts=Counter(
                "nodewright_disruption_validation_attempts_total",
                "Graceful commands re-checked after their validation delay, by result.",
                ["result"],
                registry=registry,
            ),
        )
