"""Over-limit removal order: unlaunched, empty, then cheapest-to-move (docs/disruption.md; `shared/policy/overlimit.py`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.policy.overlimit import ClaimFacts, lifetime_remaining, overlimit_victims
from shared.policy.pods import PodFacts, do_not_disrupt_active, eviction_cost

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def claim(name, launched=True, pods=(), age=DAY, expire=timedelta(days=30), deleting=False):
    return ClaimFacts(name, launched, NOW - age, expire, tuple(pods), deleting)


def pod(name="p", **kw):
    return PodFacts(name, **kw)


def names(claims):
    return [c.name for c in claims]


def test_nothing_to_remove_at_or_under_limit():
    claims = [claim("a"), claim("b")]
    assert overlimit_victims(claims, 2, NOW) == []
    assert overlimit_victims(claims, 5, NOW) == []


def test_order_unlaunched_empty_then_cost():
    claims = [
        claim("busy-new", pods=[pod(), pod()], age=timedelta(hours=1)),
        claim("busy-old", pods=[pod(), pod()], age=timedelta(days=29)),
        claim("one-pod", pods=[pod()], age=timedelta(hours=1)),
        claim("ds-only", pods=[pod(daemonset=True)]),
        claim("empty"),
        claim("pending", launched=False),
        claim("pinned", pods=[pod(do_not_disrupt="true")]),
    ]
    order = names(overlimit_victims(claims, 0, NOW))
    assert order == ["pending", "ds-only", "empty", "busy-old", "one-pod", "busy-new", "pinned"]
    assert names(overlimit_victims(claims, 4, NOW)) == ["pending", "ds-only", "empty"]


def test_daemonset_with_do_not_disrupt_is_not_empty():
    claims = [claim("ds-pinned", pods=[pod(daemonset=True, do_not_disrupt="true")]), claim("empty")]
    assert names(overlimit_victims(claims, 1, NOW)) == ["empty"]


def test_deleting_claims_do_not_count():
    claims = [claim("a"), claim("b"), claim("gone", deleting=True)]
    assert overlimit_victims(claims, 2, NOW) == []


def test_priority_raises_cost():
    cheap = claim("cheap", pods=[pod(priority=-(2**25) // 2)])
    dear = claim("dear", pods=[pod(priority=1_000_000_000)])
    assert names(overlimit_victims([dear, cheap], 1, NOW)) == ["cheap"]
    assert eviction_cost(pod(priority=1_000_000_000)) == 10.0  # clamped


def test_lifetime_remaining():
    assert lifetime_remaining(claim("x", age=timedelta(days=15)), NOW) == 0.5
    assert lifetime_remaining(claim("x", age=timedelta(days=40)), NOW) == 0.0
    assert lifetime_remaining(claim("x", expire=None), NOW) == 1.0


def test_do_not_disrupt_values():
    started = NOW - timedelta(minutes=30)
    assert do_not_disrupt_active(pod(do_not_disrupt="true"), NOW)
    assert do_not_disrupt_active(pod(do_not_disrupt="1h", start_time=started), NOW)
    assert not do_not_disrupt_active(pod(do_not_disrupt="10m", start_time=started), NOW)
    assert do_not_disrupt_active(pod(do_not_disrupt="10m"), NOW)  # not started yet
    assert not do_not_disrupt_active(pod(do_not_disrupt="yes"), NOW)
    assert not do_not_disrupt_active(pod(do_not_disrupt="-5m"), NOW)
