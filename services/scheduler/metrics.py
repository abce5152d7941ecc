"""The scheduler's metrics, in upstream's names where upstream has them (the provisioner's
`karpenter_scheduler_*`, `karpenter_nodeclaims_created_total`, the NodePool usage and limit
gauges), registered on the service's own registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PROVISIONER = "provisioner"
"""Upstream's `controller` label of the provisioner's scheduling metrics."""
PROVISIONED = "provisioned"
"""Upstream's `reason` of `karpenter_nodeclaims_created_total` for a claim provisioning made."""
DURATION_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    *(1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60),
    *(120, 150, 300, 450, 600),
)
"""Upstream's `DurationBuckets` (controller-runtime's, with the long tail)."""


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
    nodes_created: Counter
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
                "karpenter_scheduler_unschedulable_pods_count",
                "Pods the last pass could not place.",
                ["controller"],
                registry=registry,
            ),
            ignored=Gauge(
                "karpenter_scheduler_ignored_pods_count", "Pods the last pass left alone.", registry=registry
            ),
            duration=Histogram(
                "karpenter_scheduler_scheduling_duration_seconds",
                "Duration of one scheduling pass.",
                ["controller"],
                buckets=DURATION_BUCKETS,
                registry=registry,
            ),
            queue=Gauge(
                "karpenter_scheduler_queue_depth",
                "Pods waiting for a pass (`scheduling_id` empty: counted between passes).",
                ["controller", "scheduling_id"],
                registry=registry,
            ),
            nodes_created=Counter(
                "karpenter_nodes_created_total",
                "Nodes registered for a NodeClaim (NodeClaimRegistered recorded).",
                ["nodepool", "zone"],
                registry=registry,
            ),
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
