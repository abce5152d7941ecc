"""Static scale-down (upstream's `static.deprovisioning` controller, behind `StaticCapacity`): when a
static NodePool has more NodeClaims not being deleted than its `replicas` (a `kubectl scale` down),
the surplus goes now, in upstream's order (`shared.policy.overlimit.overlimit_victims`: unlaunched
claims, then empty nodes, then the cheapest to disrupt, do-not-disrupt last). Forceful as upstream
classes it: the user asked for it, so budgets do not gate it; termination still drains each node
gracefully, respecting PDBs and the grace period."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from shared.disruption.command import Command
from shared.policy.overlimit import ClaimFacts, overlimit_victims

REASON = "Overprovisioned"
"""Upstream's termination reason for it (`overprovisioned`), in the case of the other reasons."""


def scale_down(claims: Sequence[ClaimFacts], replicas: int | None, now: datetime) -> Command | None:
    """One delete command for the claims past the pool's replicas (None: not a static pool)."""
    if replicas is None:
        return None
    victims = overlimit_victims(claims, replicas, now)
    return Command(REASON, tuple(c.name for c in victims)) if victims else None
