"""Per-pod facts the disruption policy weighs: do-not-disrupt and eviction cost (upstream's `pkg/utils/disruption/`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from shared.api.duration import parse_duration

PRIORITY_SCALE = 2.0**25
DELETION_COST_SCALE = 2.0**27


@dataclass(frozen=True, slots=True)
class PodFacts:
    name: str
    daemonset: bool = False
    do_not_disrupt: str | None = None  # the karpenter.sh/do-not-disrupt annotation value
    start_time: datetime | None = None
    priority: int | None = None
    deletion_cost: str | None = None  # the controller.kubernetes.io/pod-deletion-cost annotation


def do_not_disrupt_active(pod: PodFacts, now: datetime) -> bool:
    """`"true"`, or a positive Go duration counted from the pod's start (always active before it
    starts); any other value is ignored, as upstream does."""
    value = pod.do_not_disrupt
    if value is None:
        return False
    if value == "true":
        return True
    try:
        span = parse_duration(value)
    except ValueError:
        return False
    if span.total_seconds() <= 0:
        return False
    return pod.start_time is None or now < pod.start_time + span


def eviction_cost(pod: PodFacts) -> float:
    """Upstream's EvictionCost: 1, moved by deletion cost and priority, clamped to [-10, 10]."""
    cost = 1.0
    if pod.deletion_cost is not None:
        with contextlib.suppress(ValueError):
            cost += float(pod.deletion_cost) / DELETION_COST_SCALE
    if pod.priority is not None:
        cost += pod.priority / PRIORITY_SCALE
    return min(max(cost, -10.0), 10.0)


def rescheduling_cost(pods: Iterable[PodFacts]) -> float:
    return sum(eviction_cost(p) for p in pods)
