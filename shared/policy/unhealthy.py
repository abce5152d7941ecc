"""How many unhealthy nodes a NodePool may have and still be repaired (upstream's node health
controller: 20% of the pool's nodes, rounded up). Node repair (`shared.disruption.repair`) holds
repairs back past it, and the audit re-checks every repair against it."""

from __future__ import annotations

import math

ALLOWED_UNHEALTHY_PERCENT = 20


def unhealthy_threshold(nodes: int) -> int:
    """The most unhealthy nodes of `nodes` that still allow a repair."""
    return math.ceil(nodes * ALLOWED_UNHEALTHY_PERCENT / 100)
