"""The counters fold and its rules (shared.policy.counters), driven through a replay of a log."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.events.contracts import DisruptionCancelled
from shared.policy.audit import replay
from shared.policy.counters import PoolCounters, check, evolve, fold_claim
from tests.factories import (
    T0,
    applied,
    created,
    decided,
    entries,
    failed,
    initialized,
    launched,
    live_nodes,
    terminated,
)


def rules(events, **kw):
    return [(v.type, v.rule) for v in replay(entries(events, **kw)).violations]


def test_nodes_limit_counts_claims_in_flight():
    events = [applied("p", {"nodes": "3"})] + [created(f"c{i}", "p") for i in range(4)]
    out = replay(entries(events))
    assert [(v.position, v.rule) for v in out.violations] == [(5, "limits")]
    assert "nodes 4 > limit 3" in out.violations[0].detail
    pool = out.pools["p"]
    assert (pool.nodes, pool.in_flight) == (4, 4)  # the log says it happened: the replay counts it


def test_a_claim_reserves_its_largest_option_then_settles_to_the_launched_type():
    events = [
        applied("p", {"cpu": "8"}),
        created("big", "p", ("2", "8Gi"), ("8", "32Gi")),
        created("second", "p"),  # 8 + 2 > 8
    ]
    assert rules(events) == [("NodeClaimCreated", "limits")]
    events = [
        applied("p", {"cpu": "8"}),
        created("big", "p", ("2", "8Gi"), ("8", "32Gi")),
        launched("big", "p"),
        created("second", "p"),
        created("third", "p"),
        created("fourth", "p"),
    ]
    out = replay(entries(events))
    assert out.violations == []
    assert out.pools["p"].resources["cpu"] == Decimal(8)
    assert out.pools["p"].in_flight == 3


def test_a_failed_launch_and_a_termination_release_what_was_reserved():
    events = [
        applied("p", {"nodes": "1", "cpu": "2"}),
        created("a", "p"),
        failed("a", "p"),
        created("b", "p"),
        launched("b", "p"),
        initialized("b", "p"),
        terminated("b", "p"),
        terminated("b", "p"),
        created("c", "p"),
    ]
    out = replay(entries(events))
    assert out.violations == []
    pool = out.pools["p"]
    assert (pool.nodes, pool.in_flight, pool.initialized, pool.resources["cpu"]) == (1, 1, 0, Decimal(2))


def test_launching_larger_than_reserved_is_a_capacity_violation():
    events = [applied("p", {"cpu": "100"}), created("a", "p"), launched("a", "p", cpu="4")]
    assert rules(events) == [("NodeClaimLaunched", "capacity")]


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([created("a", "p")], [("NodeClaimCreated", "nodepool")]),
        ([applied("p"), launched("ghost", "p")], [("NodeClaimLaunched", "lifecycle")]),
        ([applied("p"), created("a", "p"), created("a", "p")], [("NodeClaimCreated", "lifecycle")]),
        (
            [applied("p"), created("a", "p"), launched("a", "p"), launched("a", "p")],
            [("NodeClaimLaunched", "lifecycle")],
        ),
        ([applied("p"), applied("q"), created("a", "p"), launched("a", "q")], [("NodeClaimLaunched", "lifecycle")]),
        ([applied("p"), created("a", "p"), decided("d", "p", "Drifted", ["a"])], [("DisruptionDecided", "budget")]),
        (
            [
                applied("p", budgets=[{"nodes": "100%"}]),
                *live_nodes("p", 2),
                decided("d1", "p", "Drifted", ["p-n0"]),
                decided("d2", "p", "Drifted", ["p-n0"]),
            ],
            [("DisruptionDecided", "lifecycle")],
        ),
    ],
    ids=[
        "pool-not-applied",
        "unknown-claim",
        "created-twice",
        "launched-twice",
        "wrong-pool",
        "no-initialized-nodes-no-budget",
        "already-disrupting",
    ],
)
def test_lifecycle_rules(events, expected):
    assert rules(events) == expected


def test_an_invalid_nodepool_cannot_be_applied():
    bad = applied("p")
    bad.nodepool_object["spec"]["disruption"]["budgets"] = [{"nodes": "10%", "schedule": "@daily"}]
    assert rules([bad]) == [("NodePoolApplied", "nodepool")]


def test_budget_counts_initialized_nodes_and_those_disrupting():
    pool = [applied("p", budgets=[{"nodes": "2"}]), *live_nodes("p", 10)]
    assert rules([*pool, decided("d", "p", "Drifted", ["p-n0", "p-n1", "p-n2"])]) == [("DisruptionDecided", "budget")]
    ok = [*pool, decided("d1", "p", "Drifted", ["p-n0", "p-n1"])]
    assert rules(ok) == []
    assert rules([*ok, decided("d2", "p", "Empty", ["p-n2"])]) == [("DisruptionDecided", "budget")]
    # cancelling, or the candidates terminating, gives the budget back
    freed = [*ok, DisruptionCancelled(decision_id="d1", nodepool="p", reason="Drifted", candidates=["p-n0", "p-n1"])]
    assert rules([*freed, decided("d2", "p", "Empty", ["p-n2", "p-n3"])]) == []
    gone = [*ok, terminated("p-n0", "p"), terminated("p-n1", "p")]
    out = replay(entries([*gone, decided("d2", "p", "Empty", ["p-n2", "p-n3"])]))
    assert out.violations == []
    assert out.pools["p"].disrupting_by_reason() == {"Empty": 2}


def test_budget_percent_rounds_up_on_the_counted_nodes():
    # 10% of 10 initialized = 1; uninitialized claims do not count
    events = [applied("p", budgets=[{"nodes": "10%"}]), *live_nodes("p", 10), created("extra", "p")]
    assert rules([*events, decided("d", "p", "Underutilized", ["p-n0"])]) == []
    assert rules([*events, decided("d", "p", "Underutilized", ["p-n0", "p-n1"])]) == [("DisruptionDecided", "budget")]


def test_scheduled_budgets_are_evaluated_at_the_decision_time():
    # nodes 0 on weekdays from 09:00 for 8h (UTC); T0 is Monday 12:00
    budgets = [{"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "8h"}, {"nodes": "100%"}]
    events = [applied("p", budgets=budgets), *live_nodes("p", 3)]
    decision = decided("d", "p", "Drifted", ["p-n0"])
    at_noon = entries([*events, decision], start=T0, step=timedelta(milliseconds=1))
    assert [v.rule for v in replay(at_noon).violations] == ["budget"]
    evening = entries([*events, decision], start=T0 + timedelta(hours=6), step=timedelta(milliseconds=1))
    assert replay(evening).violations == []


def test_forceful_reasons_pass_budgets():
    # a minute between events: the claims are past their expireAfter; the limit lowered to 1 of 3
    events = [applied("p", {"nodes": "3"}, budgets=[{"nodes": "0"}], expire_after="5m"), *live_nodes("p", 3)]
    events.append(applied("p", {"nodes": "1"}, budgets=[{"nodes": "0"}], expire_after="5m"))
    step = timedelta(minutes=1)
    assert rules([*events, decided("d", "p", "Expired", ["p-n0"])], step=step) == []
    assert rules([*events, decided("d", "p", "OverLimit", ["p-n1", "p-n2"])], step=step) == []
    assert rules([*events, decided("d", "p", "Empty", ["p-n0"])], step=step) == [("DisruptionDecided", "budget")]


@pytest.mark.parametrize(
    ("limit", "mode", "expected"),
    [
        ("10", None, [("DisruptionDecided", "node-hard-limit")]),
        ("10", "Soft", []),
        ("11", None, []),
    ],
)
def test_node_hard_limit_gates_replacements(limit, mode, expected):
    events = [applied("p", {"nodes": limit}, budgets=[{"nodes": "100%"}], mode=mode), *live_nodes("p", 10)]
    decision = decided("d", "p", "Drifted", ["p-n0"], replacements=["r0"])
    replacement = created("r0", "p", replacement_for="d")
    assert rules([*events, decision, replacement]) == expected + ([("NodeClaimCreated", "limits")] if expected else [])


def test_a_delete_never_needs_node_headroom():
    events = [applied("p", {"nodes": "10"}, budgets=[{"nodes": "100%"}]), *live_nodes("p", 10)]
    assert rules([*events, decided("d", "p", "Empty", ["p-n0", "p-n1"])]) == []


def test_replacements_do_not_count_their_candidates_resources():
    events = [applied("p", {"cpu": "20"}, budgets=[{"nodes": "100%"}]), *live_nodes("p", 10)]
    decision = decided("d", "p", "Underutilized", ["p-n0"], replacements=["r0"])
    assert rules([*events, decision, created("r0", "p", replacement_for="d")]) == []
    assert rules([*events, decision, created("r0", "p")]) == [("NodeClaimCreated", "limits")]


def test_the_decision_records_what_it_saw():
    events = [applied("p", budgets=[{"nodes": "3"}]), *live_nodes("p", 5), decided("d", "p", "Drifted", ["p-n0"])]
    out = replay(entries(events), explain="nodeclaim-p-n0")
    facts = out.story[-1].facts["budget_check"]
    assert facts == {
        "nodes": 5,
        "disrupting": 0,
        "allowed": 3,
        "remaining": 3,
        "node_limit": None,
        "pool_nodes": 5,
        "active_budgets": [0],
    }
    assert [c.type for c in out.story] == [
        "NodeClaimCreated",
        "NodeClaimLaunched",
        "NodeClaimInitialized",
        "DisruptionDecided",
    ]


def test_replay_until_stops_at_the_instant():
    events = [applied("p", {"nodes": "5"}), *[created(f"c{i}", "p") for i in range(4)]]
    out = replay(entries(events), until=T0 + timedelta(seconds=3))
    assert out.pools["p"].nodes == 2
    assert out.events == 3


def test_fold_claim_reads_one_stream():
    events = [created("a", "p", ("4", "16Gi")), launched("a", "p"), initialized("a", "p")]
    state = fold_claim([(e.TYPE, e.payload()) for e in events])
    assert state is not None
    assert (state.phase, state.initialized, state.resources["cpu"]) == ("launched", True, Decimal(2))
    assert fold_claim([]) is None


@settings(max_examples=60, deadline=None)
@given(
    limit_nodes=st.integers(0, 6),
    limit_cpu=st.integers(0, 24),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["create", "launch", "fail", "terminate"]),
            st.integers(0, 9),
            st.lists(st.sampled_from([("2", "8Gi"), ("4", "16Gi"), ("8", "32Gi")]), min_size=1, max_size=3),
        ),
        max_size=60,
    ),
)
def test_strict_application_never_passes_a_limit(limit_nodes, limit_cpu, ops):
    """Appending only what the checks allow (as the store does) keeps usage within every limit,
    and the counters always equal a recount from the claims. The replay's check, which records
    nothing and takes a shorter way, refuses exactly what the store's refuses."""
    make = {
        "create": lambda name, sizes: created(name, "p", *sizes),
        "launch": lambda name, sizes: launched(name, "p", *sizes[0]),
        "fail": lambda name, sizes: failed(name, "p"),
        "terminate": lambda name, sizes: terminated(name, "p"),
    }
    pool, claims = PoolCounters("p"), {}
    event = applied("p", {"nodes": str(limit_nodes), "cpu": str(limit_cpu)})
    evolve(pool, claims, event.TYPE, event.payload(), 1)
    for i, (op, n, sizes) in enumerate(ops, 2):
        name = f"c{n}"
        e = make[op](name, sizes)
        outcome = check(pool, claims, e.TYPE, e.payload(), T0)
        quick = check(pool, claims, e.TYPE, e.payload(), T0, record=False)
        assert quick.violation == outcome.violation
        if outcome.violation is None:
            evolve(pool, claims, e.TYPE, e.payload(), i)
        assert pool.nodes <= limit_nodes
        assert pool.resources.get("cpu", Decimal(0)) <= limit_cpu
        live = [c for c in claims.values() if c.phase != "ended"]
        assert pool.nodes == len(live)
        assert pool.in_flight == sum(c.phase == "in_flight" for c in live)
        assert pool.resources.get("cpu", Decimal(0)) == sum((c.resources["cpu"] for c in live), Decimal(0))


def test_a_rejected_update_takes_the_pool_out_until_a_valid_spec_is_applied_again():
    from shared.events.contracts import NodePoolRejected

    rejected = NodePoolRejected(nodepool="p", errors=[{"path": "spec.limits[cpu]", "message": "bad"}])
    events = [applied("p"), created("a", "p"), rejected, created("b", "p"), applied("p"), created("c", "p")]
    out = replay(entries(events))
    assert [(v.position, v.rule) for v in out.violations] == [(4, "nodepool")]
    assert "is not applied" in out.violations[0].detail


def test_explaining_a_claim_survives_malformed_events_about_it():
    from shared.policy.audit import LogEntry

    log = entries([applied("p"), created("a", "p"), terminated("a", "p")])
    log += [
        LogEntry(4, "nodeclaim-a", "NodeClaimLaunched", {"nodeclaim": "a", "nodepool": "p"}, T0),  # no provider_id
        LogEntry(5, "disruption-x", "DisruptionDecided", {"nodepool": "p", "candidates": 5}, T0),
    ]
    out = replay(log, explain="nodeclaim-a")
    assert [c.position for c in out.story] == [2, 3, 4]
    assert "malformed" in out.story[-1].text
    assert {v.position for v in out.violations} == {4, 5}


def test_b20_a_deleting_node_consumes_the_budget_whoever_asked():
    """docs/budgets.md, B20: `[100%]`-style counting with a user's deletion; here a budget of 2 with one
    claim deleted by hand leaves room for one decision of one candidate."""
    from shared.events.contracts import NodeClaimDeletionRequested

    pool = [applied("p", budgets=[{"nodes": "2"}]), *live_nodes("p", 10)]
    manual = [*pool, NodeClaimDeletionRequested(nodeclaim="p-n9", nodepool="p")]
    assert rules([*manual, decided("d", "p", "Empty", ["p-n0", "p-n1"])]) == [("DisruptionDecided", "budget")]
    assert rules([*manual, decided("d", "p", "Empty", ["p-n0"])]) == []
    # it counts until it ends, and a deleting claim is never a candidate
    assert rules([*manual, decided("d", "p", "Empty", ["p-n9"])]) == [("DisruptionDecided", "lifecycle")]
    ended = [*manual, terminated("p-n9", "p")]
    assert rules([*ended, decided("d", "p", "Empty", ["p-n0", "p-n1"])]) == []


def test_a_completed_command_keeps_its_candidates_counted_until_they_end_and_a_validation_drops_some():
    from shared.events.contracts import DisruptionCompleted, DisruptionValidated

    pool = [applied("p", budgets=[{"nodes": "2"}]), *live_nodes("p", 10), decided("d", "p", "Empty", ["p-n0", "p-n1"])]
    trimmed = DisruptionValidated(
        decision_id="d", nodepool="p", reason="Empty", kept=["p-n0"], dropped={"p-n1": "churn"}
    )
    done = DisruptionCompleted(decision_id="d", nodepool="p", reason="Empty")
    out = replay(entries([*pool, trimmed, done]))
    assert out.violations == [] and out.pools["p"].disrupting_by_reason() == {"Empty": 1}
    assert rules([*pool, trimmed, done, decided("e", "p", "Empty", ["p-n2", "p-n3"])]) == [
        ("DisruptionDecided", "budget")
    ]
    assert rules([*pool, trimmed, done, terminated("p-n0", "p"), decided("e", "p", "Empty", ["p-n2", "p-n3"])]) == []


def _flip(name: str, ready: bool):
    from shared.events.contracts import NodeClaimNotReady, NodeClaimReady

    kind = NodeClaimReady if ready else NodeClaimNotReady
    return kind(nodeclaim=name, nodepool="p", node=name)


def test_b21_not_ready_nodes_consume_the_budget_until_ready_again():
    """docs/budgets.md, B21: `[100%]`, 10 nodes, 2 NotReady: 8 may be disrupted."""
    pool = [applied("p", budgets=[{"nodes": "100%"}]), *live_nodes("p", 10), _flip("p-n8", False), _flip("p-n9", False)]
    eight = [f"p-n{i}" for i in range(8)]
    assert rules([*pool, decided("d", "p", "Empty", eight)]) == []
    assert rules([*pool, decided("d", "p", "Empty", [*eight, "p-n8"])]) == [("DisruptionDecided", "budget")]
    assert replay(entries(pool)).pools["p"].disrupting_by_reason() == {"NotReady": 2}
    recovered = [*pool, _flip("p-n9", True)]
    assert rules([*recovered, decided("d", "p", "Empty", [*eight, "p-n8"])]) == []


def test_a_not_ready_node_may_be_a_candidate_and_still_counts_when_its_command_is_cancelled():
    pool = [applied("p", budgets=[{"nodes": "3"}]), *live_nodes("p", 10), _flip("p-n9", False)]
    expiring = decided("d", "p", "Empty", ["p-n9", "p-n0"])
    assert rules([*pool, expiring]) == []
    cancelled = DisruptionCancelled(decision_id="d", nodepool="p", reason="Empty", candidates=["p-n9", "p-n0"])
    out = replay(entries([*pool, expiring, cancelled]))
    assert out.violations == [] and out.pools["p"].disrupting == {"p-n9": ["NotReady", ""]}


def test_b23_an_uninitialized_not_ready_claim_consumes_nothing_until_it_initializes():
    pool = [applied("p", budgets=[{"nodes": "1"}]), created("new", "p"), launched("new", "p"), _flip("new", False)]
    assert replay(entries(pool)).pools["p"].disrupting == {}
    out = replay(entries([*pool, initialized("new", "p")]))
    assert out.violations == [] and out.pools["p"].disrupting == {"new": ["NotReady", ""]}
