"""`Consolidatable` (upstream's `pkg/controllers/nodeclaim/disruption/consolidation.go`): a node may
be emptied or consolidated once consolidateAfter has passed since its last pod event (a
non-DaemonSet pod bound, finished or started terminating), or since it was initialized if no pod
event came; `Never` disables both."""

from __future__ import annotations

from datetime import datetime, timedelta


def consolidatable_at(
    consolidate_after: timedelta | None, initialized_at: datetime, last_pod_event: datetime | None
) -> datetime | None:
    """When the node becomes Consolidatable; None when consolidateAfter is Never."""
    if consolidate_after is None:
        return None
    return (last_pod_event or initialized_at) + consolidate_after


def consolidatable(
    consolidate_after: timedelta | None, initialized_at: datetime, last_pod_event: datetime | None, now: datetime
) -> bool:
    at = consolidatable_at(consolidate_after, initialized_at, last_pod_event)
    return at is not None and now >= at


def disabled_message(nodepool: str) -> str:
    """Upstream's `Unconsolidatable` text when the pool's consolidateAfter is Never."""
    return f'NodePool "{nodepool}" has consolidation disabled'
