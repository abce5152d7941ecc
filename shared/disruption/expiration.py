"""Expiration (upstream's `pkg/controllers/disruption/expiration.go`): a claim goes at its creation
time plus its pool's expireAfter. Forceful, as upstream v1: no budget, no do-not-disrupt or PDB
check and no replacement first; termination still drains it gracefully up to the grace period.
Oldest expiry first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.disruption.command import Command

REASON = "Expired"


@dataclass(frozen=True, slots=True)
class Expiring:
    nodeclaim: str
    created_at: datetime
    expire_after: timedelta | None
    """None: Never."""
    deleting: bool = False

    @property
    def expires_at(self) -> datetime | None:
        return None if self.expire_after is None else self.created_at + self.expire_after


def expiration(claims: Sequence[Expiring], now: datetime) -> Command | None:
    """One delete command for every claim past its expiry and not already going."""
    due = sorted(
        (c for c in claims if not c.deleting and c.expires_at is not None and now >= c.expires_at),
        key=lambda c: (c.expires_at, c.nodeclaim),
    )
    return Command(REASON, tuple(c.nodeclaim for c in due)) if due else None


def next_expiry(claims: Sequence[Expiring], now: datetime) -> datetime | None:
    """When the next claim expires after `now`: when the service should look again."""
    upcoming = [c.expires_at for c in claims if not c.deleting and c.expires_at is not None and c.expires_at > now]
    return min(upcoming, default=None)
