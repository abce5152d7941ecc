"""Over-limit removal (beyond upstream): when `limits.nodes` falls below a pool's node count, the excess
goes now, in the order `shared.policy.overlimit` gives. Forceful in that budgets do not gate it
(the limit is the user's word); termination still drains each claim gracefully."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from shared.disruption.command import Command
from shared.policy.overlimit import ClaimFacts, overlimit_victims

REASON = "OverLimit"


def over_limit(claims: Sequence[ClaimFacts], node_limit: int | None, now: datetime) -> Command | None:
    """One delete command for the claims past the pool's node limit (None: no limit)."""
    if node_limit is None:
        return None
    victims = overlimit_victims(claims, node_limit, now)
    return Command(REASON, tuple(c.name for c in victims)) if victims else None
