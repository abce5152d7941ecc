"""Termination's metrics, in upstream's names and labels (`pkg/controllers/node/termination/`,
its `terminator`, and `pkg/controllers/nodeclaim/lifecycle/metrics.go`), registered on the
service's own registry and counted by its drains (`services.termination.drain`)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, Summary

CLAIM_BUCKETS = tuple(float(2**i) for i in range(12))
"""1 s to 2048 s, doubling: upstream's NodeClaim termination buckets."""
INSTANCE_BUCKETS = tuple(float(2**i) for i in range(11))
"""1 s to 1024 s, doubling: upstream's instance termination buckets."""
LIFETIME_BUCKETS = tuple(float(m * 60) for m in (15, 30, 45, 60, 120, 240, 360, 480, 600, 720, 960, 1200)) + tuple(
    float(d * 86400) for d in (1, 2, 3, 5, 10, 15, 20, 25, 30)
)
"""15 minutes to 30 days: upstream's node lifetime buckets."""


@dataclass(frozen=True)
class DrainMetrics:
    terminated: Counter
    nodes_terminated: Counter
    nodes_drained: Counter
    pods_drained: Counter
    eviction_requests: Counter
    claim_duration: Histogram
    instance_duration: Histogram
    node_duration: Summary
    node_lifetime: Histogram

    @classmethod
    def on(cls, registry: CollectorRegistry) -> DrainMetrics:
        return cls(
            terminated=Counter(
                "karpenter_nodeclaims_terminated_total",
                "NodeClaims terminated.",
                ["nodepool", "capacity_type", "zone"],
                registry=registry,
            ),
            nodes_terminated=Counter(
                "karpenter_nodes_terminated_total", "Nodes terminated.", ["nodepool", "zone"], registry=registry
            ),
            nodes_drained=Counter("karpenter_nodes_drained_total", "Nodes drained.", ["nodepool"], registry=registry),
            pods_drained=Counter(
                "karpenter_pods_drained_total", "Pods drained off terminating nodes.", ["reason"], registry=registry
            ),
            eviction_requests=Counter(
                "karpenter_pods_eviction_requests_total",
                "Eviction API requests, by answer.",
                ["code"],
                registry=registry,
            ),
            claim_duration=Histogram(
                "karpenter_nodeclaims_termination_duration_seconds",
                "From a NodeClaim's deletion request to its termination (clock seconds).",
                ["nodepool"],
                buckets=CLAIM_BUCKETS,
                registry=registry,
            ),
            instance_duration=Histogram(
                "karpenter_nodeclaims_instance_termination_duration_seconds",
                "From the first delete of a claim's instance to the cloud no longer knowing it (clock seconds).",
                ["nodepool"],
                buckets=INSTANCE_BUCKETS,
                registry=registry,
            ),
            node_duration=Summary(
                "karpenter_nodes_termination_duration_seconds",
                "From a node's drain start to its deletion (clock seconds).",
                ["nodepool"],
                registry=registry,
            ),
            node_lifetime=Histogram(
                "karpenter_nodes_lifetime_duration_seconds",
                "From a node's registration to its deletion (clock seconds).",
                ["nodepool"],
                buckets=LIFETIME_BUCKETS,
                registry=registry,
            ),
        )
