"""The scheduler's metrics, in upstream's names where upstream has them (the provisioner's
`karpenter_scheduler_*`, `karpenter_nodeclaims_created_total`, the NodePool usage and limit
gauges), registered on the service's own registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


def resource_type(name: str) -> str:
    """Karpenter's `resource_type` label: lowercase, `-` as `_`."""
    return name.lower().replace("-", "_")


@dataclass(frozen=True)
class SchedulerMetrics:
    leader: Gauge
    created: Counter
    unschedulable: Gauge
    ignored: Gauge
    duration: Histogram
    queue: Gauge
    timeouts: Counter
    deferred: Gauge
    usage: Gauge
    limit: Gauge

    @classmethod
    def on(cls, registry: CollectorRegistry) -> SchedulerMetrics:
        return cls(
            leader=Gauge("nodewright_scheduler_leader", "1 while this replica plans.", registry=registry),
            created=Counter(
                "karpenter_nodeclaims_created_total",
                "NodeClaims created.",
                ["reason", "nodepool", "min_values_relaxed"],
                registry=registry,
            ),
            unschedulable=Gauge(
                "karpenter_scheduler_unschedulable_pods_count", "Pods the last pass could not place.", registry=registry
            ),
            ignored=Gauge(
                "karpenter_scheduler_ignored_pods_count", "Pods the last pass left alone.", registry=registry
            ),
            duration=Histogram(
                "karpenter_scheduler_scheduling_duration_seconds",
                "Duration of one scheduling pass.",
                registry=registry,
            ),
            queue=Gauge("karpenter_scheduler_queue_depth", "Pods waiting for a pass.", registry=registry),
            timeouts=Counter(
                "nodewright_scheduler_pass_timeouts_total",
                "Passes that reached their time bound and left pods to the next pass.",
                registry=registry,
            ),
            deferred=Gauge(
                "nodewright_scheduler_deferred_pods", "Pods the last pass left to the next one.", registry=registry
            ),
            usage=Gauge(
                "karpenter_nodepools_usage",
                "Resources a NodePool uses.",
                ["nodepool", "resource_type"],
                registry=registry,
            ),
            limit=Gauge(
                "karpenter_nodepools_limit",
                "A NodePool's limits.",
                ["nodepool", "resource_type"],
                registry=registry,
            ),
        )
