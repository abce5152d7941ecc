"""The order candidates are tried in: cheapest to disrupt first (upstream's `disruptionutils.ReschedulingCost` and `LifetimeRemaining`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.disruption.order import by_disruption_cost, disruption_cost
from shared.policy.overlimit import ClaimFacts
from shared.policy.pods import PodFacts

NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)
MONTH = timedelta(days=30)


def claim(
    name: str, pods: int, age: timedelta = timedelta(days=1), expire: timedelta | None = MONTH, **pod
) -> ClaimFacts:
    facts = tuple(PodFacts(f"{name}-{i}", **pod) for i in range(pods))
    return ClaimFacts(name, True, NOW - age, expire, facts)


def test_fewer_pods_and_less_life_left_go_first_daemonset_pods_cost_nothing():
    claims = [
        claim("three", 3),
        claim("one", 1),
        claim("three-nearly-expired", 3, age=timedelta(days=29)),
        claim("daemons", 2, daemonset=True),
        claim("forever", 1, expire=None),
    ]
    assert disruption_cost(claims[3], NOW) == 0
    assert by_disruption_cost(claims, NOW) == ["daemons", "three-nearly-expired", "one", "forever", "three"]


def test_priority_and_deletion_cost_move_a_pod_s_weight():
    cheap = claim("cheap", 1, deletion_cost="-1000000000")
    dear = claim("dear", 1, priority=1_000_000_000)
    plain = claim("plain", 1)
    assert by_disruption_cost([dear, plain, cheap], NOW) == ["cheap", "plain", "dear"]
