"""Over-limit removal as a disruption method: lowering limits.nodes from 10 to 6 removes 4, in
the documented order, whatever the budgets; claims already going count as gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.disruption.command import Decision
from shared.disruption.overlimit import over_limit
from shared.policy.overlimit import ClaimFacts
from shared.policy.pods import PodFacts

NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)


def claim(name: str, pods: int = 1, launched: bool = True, deleting: bool = False) -> ClaimFacts:
    return ClaimFacts(
        name,
        launched,
        NOW - timedelta(days=1),
        timedelta(days=30),
        tuple(PodFacts(f"{name}-{i}") for i in range(pods)),
        deleting,
    )


def test_lowering_the_limit_from_ten_to_six_removes_four_in_order():
    claims = [claim(f"busy{i}", pods=3) for i in range(7)] + [claim("empty", pods=0), claim("pending", launched=False)]
    claims.append(claim("light", pods=1))
    command = over_limit(claims, 6, NOW)
    assert command is not None and command.reason == "OverLimit" and command.decision is Decision.DELETE
    assert command.candidates[:3] == ("pending", "empty", "light") and len(command.candidates) == 4


def test_claims_already_going_count_as_gone_and_no_limit_removes_nothing():
    claims = [claim("a"), claim("b"), claim("c", deleting=True)]
    assert over_limit(claims, 2, NOW) is None
    assert over_limit(claims, 1, NOW).candidates == ("a",)
    assert over_limit(claims, None, NOW) is None
