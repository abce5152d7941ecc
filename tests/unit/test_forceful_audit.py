"""The audit re-checks forceful decisions (shared.policy.forceful): an `Expired` decision against
each candidate's age and expireAfter at the decision, an `OverLimit` one against the pool's count
and `limits.nodes` then, and the `forceful` flag honoured only for those two reasons.

Events are ten minutes apart (`STEP`): a claim created at position i is (j - i) * 10 minutes old
at a decision at position j."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.policy.audit import replay
from shared.policy.counters import ERRORS, PoolCounters, check, evolve, raise_for
from shared.policy.violations import InvalidTransition, ReservationError
from tests.factories import (
    applied,
    created,
    decided,
    deletion_requested,
    entries,
    initialized,
    launched,
    live_nodes,
    terminated,
)

STEP = timedelta(minutes=10)


def found(events):
    return [(v.rule, v.detail) for v in replay(entries(events, step=STEP)).violations]


def rules(events):
    return [rule for rule, _ in found(events)]


def young(name: str, pool: str = "p") -> list:
    """A claim created, launched and initialized: three events, so 30 minutes old at the next."""
    return [created(name, pool), launched(name, pool), initialized(name, pool)]


# --- Expired -------------------------------------------------------------------------------------

OLD = [applied("p", expire_after="1h"), *live_nodes("p", 3)]  # p-n0 created at position 2: 90m old at 11


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([*OLD, decided("d", "p", "Expired", ["p-n0"])], []),
        ([*OLD, decided("d", "p", "Expired", ["p-n0", "p-n1"])], []),  # n1: 60m, exactly its expireAfter
        ([*OLD, decided("d", "p", "Expired", ["p-n2"])], ["expired"]),  # n2: 30m
        ([*OLD, *young("y"), decided("d", "p", "Expired", ["y"])], ["expired"]),
        (
            [applied("p", expire_after="Never"), *live_nodes("p", 3), decided("d", "p", "Expired", ["p-n0"])],
            ["expired"],
        ),
        # the expireAfter a claim was created with holds, whatever the pool says later
        (
            [
                applied("p"),
                *live_nodes("p", 1),
                applied("p", expire_after="1m"),
                decided("d", "p", "Expired", ["p-n0"]),
            ],
            ["expired"],
        ),
        ([*OLD, applied("p", expire_after="Never"), decided("d", "p", "Expired", ["p-n0"])], []),
        # the flag does not make an Expired decision: its reason does, and its age is checked
        ([*OLD, decided("d", "p", "Expired", ["p-n2"], forceful=False)], ["expired"]),
    ],
    ids=[
        "old-enough",
        "exactly-expired",
        "young",
        "young-new-claim",
        "never",
        "created-720h",
        "created-1h",
        "unflagged",
    ],
)
def test_an_expired_decision_is_rechecked_against_each_candidates_age(events, expected):
    assert rules(events) == expected


def test_an_expired_violation_names_the_young_claims_their_age_and_expire_after():
    events = [*OLD, *young("y"), decided("d", "p", "Expired", ["p-n0", "y", "p-n2"])]  # p-n2: 60m old
    ((rule, detail),) = found(events)
    assert (rule, detail) == (
        "expired",
        "decision d in nodepool p expires 1 claim(s) not expired then: y is 30m old, its expireAfter 1h",
    )
    never = [applied("p", expire_after="Never"), *live_nodes("p", 1), decided("d", "p", "Expired", ["p-n0"])]
    assert found(never)[0][1].endswith("p-n0 never expires (expireAfter Never)")


def test_explain_tells_the_age_and_the_violation():
    events = [*OLD, *young("y"), decided("d", "p", "Expired", ["y"])]
    out = replay(entries(events, step=STEP), explain="nodeclaim-y")
    last = out.story[-1]
    assert "forceful, budgets do not apply; y 30m old, expireAfter 1h" in last.text
    assert "[VIOLATION expired: decision d in nodepool p expires 1 claim(s)" in last.text
    assert last.facts["expiry_check"] == {"y": {"age": "30m", "expire_after": "1h"}}


# --- OverLimit ------------------------------------------------------------------------------------

TEN = [applied("p", {"nodes": "10"}, budgets=[{"nodes": "0"}]), *live_nodes("p", 10)]
LOWERED = [*TEN, applied("p", {"nodes": "6"}, budgets=[{"nodes": "0"}])]


def names(*indexes: int) -> list[str]:
    return [f"p-n{i}" for i in indexes]


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([*LOWERED, decided("d", "p", "OverLimit", names(0, 1, 2, 3))], []),
        ([*LOWERED, decided("d", "p", "OverLimit", names(0, 1))], []),  # fewer than the excess: never below
        ([*TEN, decided("d", "p", "OverLimit", names(0))], ["over-limit"]),  # at its limit
        ([*LOWERED, decided("d", "p", "OverLimit", names(0, 1, 2, 3, 4))], ["over-limit"]),  # below it
        (
            [applied("p", budgets=[{"nodes": "0"}]), *live_nodes("p", 3), decided("d", "p", "OverLimit", names(0))],
            ["over-limit"],
        ),  # no limit
        # claims already ending are set aside: terminated, decided, or deleted
        ([*LOWERED, terminated("p-n9", "p"), decided("d", "p", "OverLimit", names(0, 1, 2, 3))], ["over-limit"]),
        ([*LOWERED, terminated("p-n9", "p"), decided("d", "p", "OverLimit", names(0, 1, 2))], []),
        (
            [*LOWERED, deletion_requested("p-n9", "p"), decided("d", "p", "OverLimit", names(0, 1, 2, 3))],
            ["over-limit"],
        ),
        (
            [
                *LOWERED,
                decided("e", "p", "Expired", names(9), forceful=True),
                decided("d", "p", "OverLimit", names(0, 1, 2)),
            ],
            ["expired"],  # the claims are minutes old; the OverLimit decision is right once n9 is going
        ),
    ],
    ids=[
        "excess",
        "part-of-the-excess",
        "at-the-limit",
        "below-the-limit",
        "no-limit",
        "terminated-counts-no-more",
        "terminated-then-right",
        "deleted-set-aside",
        "after-an-expired-decision",
    ],
)
def test_an_over_limit_decision_is_rechecked_against_the_count_and_limit(events, expected):
    assert rules(events) == expected


def test_a_claim_deleted_before_it_initialized_is_set_aside_too():
    """The budgets do not count an uninitialized claim, but the over-limit method leaves a
    deleted one aside all the same."""
    four = [applied("p", {"nodes": "4"}), *[created(f"c{i}", "p") for i in range(4)], deletion_requested("c0", "p")]
    lowered = [*four, applied("p", {"nodes": "2"})]  # 3 not being deleted, 1 above the limit
    assert rules([*lowered, decided("d", "p", "OverLimit", ["c1"])]) == []
    assert rules([*lowered, decided("d", "p", "OverLimit", ["c1", "c2"])]) == ["over-limit"]
    ended = [*four, terminated("c0", "p"), created("c4", "p"), applied("p", {"nodes": "2"})]
    assert rules([*ended, decided("d", "p", "OverLimit", ["c1", "c2"])]) == []  # c0 gone, c4 counts


def test_an_over_limit_violation_names_the_pool_its_count_and_limit():
    ((rule, detail),) = found([*TEN, decided("d", "p", "OverLimit", names(0))])
    assert rule == "over-limit"
    assert detail == (
        "decision d removes 1 claim(s) of nodepool p for OverLimit, but it is not over its limit: "
        "10 node(s) not being deleted (10 in all), limits.nodes 10"
    )
    ((_, below),) = found(
        [*LOWERED, deletion_requested("p-n9", "p"), decided("d", "p", "OverLimit", names(0, 1, 2, 3))]
    )
    assert below.endswith("1 more than the 3 above its limit: 9 node(s) not being deleted (10 in all), limits.nodes 6")
    out = replay(
        entries([*LOWERED, decided("d", "p", "OverLimit", names(0, 1, 2, 3))], step=STEP), explain="nodeclaim-p-n0"
    )
    assert out.story[-1].text.endswith("10 node(s) not being deleted (10 in all), limits.nodes 6")
    assert out.story[-1].facts["over_limit_check"]["excess"] == 4


# --- the forceful flag ---------------------------------------------------------------------------

OPEN = [applied("p", budgets=[{"nodes": "100%"}]), *live_nodes("p", 3)]
FROZEN = [applied("p", budgets=[{"nodes": "0"}]), *live_nodes("p", 3)]


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([*OPEN, decided("d", "p", "Underutilized", ["p-n0"], forceful=True)], ["forceful"]),
        ([*FROZEN, decided("d", "p", "Underutilized", ["p-n0"], forceful=True)], ["budget", "forceful"]),
        ([*FROZEN, decided("d", "p", "Drifted", ["p-n0"], forceful=True)], ["budget", "forceful"]),
        ([*OPEN, decided("d", "p", "Empty", ["p-n0"])], []),
        ([*FROZEN, decided("d", "p", "Empty", ["p-n0"])], ["budget"]),
    ],
    ids=["within-budget", "over-budget", "drifted-over-budget", "unflagged", "unflagged-over-budget"],
)
def test_the_flag_is_honoured_only_for_forceful_reasons(events, expected):
    assert rules(events) == expected


def test_the_store_refuses_a_graceful_decision_marked_forceful():
    pool, claims = PoolCounters("p"), {}
    for position, event in enumerate(OPEN, 1):
        evolve(pool, claims, event.TYPE, event.payload(), position)
    event = decided("d", "p", "Empty", ["p-n0"], forceful=True)
    outcome = check(pool, claims, event.TYPE, event.payload(), entries(OPEN)[-1].occurred_at)
    assert outcome.violation is not None and outcome.violation.rule == "forceful"
    assert ERRORS["forceful"] is InvalidTransition
    with pytest.raises(ReservationError, match="marked forceful, but Empty is not a forceful reason"):
        raise_for(outcome, "p")
