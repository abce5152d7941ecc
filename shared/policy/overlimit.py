"""Which NodeClaims to remove when a pool has more nodes than `limits.nodes` allows (beyond upstream).

The order is the order of upstream's static scale-down (`pkg/controllers/static/deprovisioning/`):
unlaunched claims first, then empty nodes (no pods, or only DaemonSet pods none of which is
do-not-disrupt), then the rest with nodes holding an active do-not-disrupt pod last, cheapest first
by rescheduling cost times the fraction of lifetime remaining. Ties keep a stable order by name so
replays agree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.policy.pods import PodFacts, do_not_disrupt_active, rescheduling_cost


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    name: str
    launched: bool
    created_at: datetime
    expire_after: timedelta | None = None
    pods: tuple[PodFacts, ...] = field(default_factory=tuple)
    deleting: bool = False


def lifetime_remaining(claim: ClaimFacts, now: datetime) -> float:
    """Fraction of the claim's lifetime left, in [0, 1]; 1 when it never expires."""
    if claim.expire_after is None or claim.expire_after.total_seconds() <= 0:
        return 1.0
    total = claim.expire_after.total_seconds()
    left = total - (now - claim.created_at).total_seconds()
    return min(max(left / total, 0.0), 1.0)


def is_empty(claim: ClaimFacts, now: datetime) -> bool:
    return all(p.daemonset for p in claim.pods) and not any(do_not_disrupt_active(p, now) for p in claim.pods)


def overlimit_victims(claims: Sequence[ClaimFacts], node_limit: int, now: datetime) -> list[ClaimFacts]:
    """The claims to remove, in order, so that at most `node_limit` remain (deleting ones aside)."""
    active = sorted((c for c in claims if not c.deleting), key=lambda c: c.name)
    excess = len(active) - max(node_limit, 0)
    if excess <= 0:
        return []
    unlaunched = [c for c in active if not c.launched]
    launched = [c for c in active if c.launched]
    empty = [c for c in launched if is_empty(c, now)]
    empty_names = {c.name for c in empty}
    rest = sorted(
        (c for c in launched if c.name not in empty_names),
        key=lambda c: (
            any(do_not_disrupt_active(p, now) for p in c.pods),
            rescheduling_cost(c.pods) * lifetime_remaining(c, now),
        ),
    )
    return (unlaunched + empty + rest)[:excess]
