"""The order candidates are tried in (upstream's disruption cost, `pkg/utils/disruption/`): cheapest to disrupt first,
the cost of moving a node's pods weighted by how much of its life is left, so a node about to
expire anyway is disrupted before a new one with the same pods."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from shared.policy.overlimit import ClaimFacts, lifetime_remaining
from shared.policy.pods import rescheduling_cost


def disruption_cost(claim: ClaimFacts, now: datetime) -> float:
    return rescheduling_cost(p for p in claim.pods if not p.daemonset) * lifetime_remaining(claim, now)


def by_disruption_cost(claims: Sequence[ClaimFacts], now: datetime) -> list[str]:
    """Claim names, cheapest to disrupt first; ties by name, so replays agree."""
    return [c.name for c in sorted(claims, key=lambda c: (disruption_cost(c, now), c.name))]
