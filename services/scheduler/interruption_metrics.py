"""The interruption controller's metrics, in upstream's names (`pkg/controllers/interruption/
metrics.go`), and the claims it hands to termination (`karpenter_nodeclaims_disrupted_total`, with
the message kind as the reason, as upstream's handler counts them)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

QUEUE_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
"""Seconds a message waited: a long poll takes it within a second or two, a backlog much longer."""


@dataclass(frozen=True)
class InterruptionMetrics:
    received: Counter
    deleted: Counter
    queued: Histogram
    disrupted: Counter

    @classmethod
    def on(cls, registry: CollectorRegistry) -> InterruptionMetrics:
        return cls(
            received=Counter(
                "karpenter_interruption_received_messages_total",
                "Messages received from the interruption queue, by message type.",
                ["message_type"],
                registry=registry,
            ),
            deleted=Counter(
                "karpenter_interruption_deleted_messages_total",
                "Messages deleted from the interruption queue.",
                registry=registry,
            ),
            queued=Histogram(
                "karpenter_interruption_message_queue_duration_seconds",
                "How long a message was on the queue before it was handled.",
                buckets=QUEUE_BUCKETS,
                registry=registry,
            ),
            disrupted=Counter(
                "karpenter_nodeclaims_disrupted_total",
                "NodeClaims handed to termination by an interruption message (consolidation_policy and "
                "termination_mode left empty, as upstream's handler leaves them).",
                ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
                registry=registry,
            ),
        )
